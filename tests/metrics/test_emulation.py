"""Measured or emulated (metrics.emulation): a group's kind from its runs, and the refusal that
keeps an emulated config from being set beside a measured one unasked."""

from __future__ import annotations

import pyarrow as pa

from metrics.emulation import MEASURED, kind_of, kind_of_runs, refusal


def test_a_group_is_emulated_when_any_of_its_runs_is():
    assert kind_of_runs(pa.table({"output_throughput": [1.0, 2.0]})) == MEASURED  # written before the keys
    assert kind_of_runs(pa.table({"emulated": [False, False], "timing_source": ["measured", "measured"]})) == MEASURED
    t = pa.table({"emulated": [True, False, True],
                  "timing_source": ["mocker-polynomial", "measured", "mocker-profile:/p"]})
    assert kind_of_runs(t) == "emulated (mocker-polynomial, mocker-profile:/p)"
    assert kind_of(True, None) == "emulated (unknown timing)"


def test_mixed_kinds_are_refused_naming_the_flag_and_each_config():
    kinds = {"real": MEASURED, "mock": "emulated (mocker-polynomial)"}
    msg = refusal(kinds, "--allow-emulated")
    assert msg.splitlines()[1:3] == ["  real: measured", "  mock: emulated (mocker-polynomial)"]
    assert msg.endswith("say so: --allow-emulated")
    assert refusal({"a": MEASURED, "b": MEASURED}, "x") is None
    assert refusal({"a": "emulated (p)", "b": "emulated (q)"}, "x") is None  # two emulated configs: one kind
