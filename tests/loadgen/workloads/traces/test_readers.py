"""loadgen/workloads/traces/readers.py: the registry of trace readers.  Every trace workload
documented under conf/workload/ resolves to the reader of its own module; an unknown name is
one error listing the known ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.workloads.traces.common import TraceError
from loadgen.workloads.traces.readers import FORMATS, reader

CONF = Path(__file__).resolve().parents[4] / "conf" / "workload"
DOCUMENTED = sorted(p.stem for p in CONF.glob("*.yaml") if p.stem != "synthetic")


def test_every_documented_trace_workload_has_its_reader():
    assert len(DOCUMENTED) == 9 and sorted(FORMATS) == DOCUMENTED
    for name in DOCUMENTED:
        assert reader(name).__module__ == f"loadgen.workloads.traces.{name}"


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(TraceError) as e:
        reader("parquetish")
    assert str(e.value) == ("workload=parquetish: unknown trace format (known: azure, burstgpt, mooncake, "
                            "sharegpt, jsonl, aiperf, aiperf_dag, guidellm, sglang_agentic, synthetic)")
