"""``protocol=promote`` end to end against scripted fake endpoints, with live traffic from the
test: a good candidate is promoted through every stage, one that starts failing is rolled back
by a guard mid-stage, and no caller ever sees the candidate's failures; a promotion that fails or
is terminated mid-way still writes its record and ends its MLflow parent run FAILED."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from types import SimpleNamespace

import aiohttp
import pyarrow.parquet as pq
import pytest

from conf.compose import compose_config
from harness import lifecycle
from harness.commands.interrupts import Terminated
from protocols.promote.run import Promotion
from tests.fake_server import CLOSE, HEAD_CHUNKED, FakeServer
from tests.harness.test_finish import RecordingLogger
from tests.harness.test_proxy import ok_script, stream

# max_duration_s leaves room for a busy host (a CI check here pushed 21 candidate requests
# through a shadow stage in 8 s); a quiet one decides each stage after its minimum
STAGES = ("protocol.stages=[{mode: shadow, min_requests: 25, min_duration_s: 1.5, max_duration_s: 40}, "
          "{share: 0.5, min_requests: 25, min_duration_s: 1.5, max_duration_s: 40}, "
          "{share: 1.0, mirror: 0.5, min_requests: 25, min_duration_s: 1.5, max_duration_s: 40}]")
# latency on a shared test machine is noise: gate errors, attainment and agreement only
NOT_LATENCY = [f"protocol.gate.margins.{m}=null" for m in ("p50_ttft_ms", "p90_ttft_ms", "p50_tpot_ms",
                                                           "p90_tpot_ms", "cost_per_mtok_good")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _promote(tmp_path, cand_script):
    port = _free_port()
    with FakeServer(ok_script("i", gap=0.002)) as inc, FakeServer(cand_script) as cand:
        overrides = ["protocol=promote", f"proxy.incumbent={inc.url}", f"proxy.candidate={cand.url}",
                     f"proxy.port={port}", "protocol.traffic=live", "mlflow.enabled=false", "report.enabled=false",
                     f"output_dir={tmp_path}", "protocol.after_s=1", "protocol.guard.interval_s=0.25", STAGES,
                     *NOT_LATENCY]
        p = Promotion(compose_config(overrides), overrides)
        stop, seen = threading.Event(), []

        def callers():
            async def go():
                async with aiohttp.ClientSession() as s:
                    i = 0
                    while not stop.is_set():
                        body = {"model": "m", "prompt": "x", "max_tokens": 4, "stream": True, "temperature": 0}
                        try:
                            async with s.post(f"http://127.0.0.1:{port}/v1/completions", json=body,
                                              headers={"X-Session-Id": f"s{i % 40}"}) as r:
                                raw = await r.read()
                                seen.append((r.status, b"".join(raw.split(b'"text":"')[1:]).count(b"alpha")))
                        except aiohttp.ClientError:
                            pass  # before the proxy is up, after it is gone
                        i += 1
                        await asyncio.sleep(0.01)
            asyncio.run(go())

        th = threading.Thread(target=callers, daemon=True)
        shutdown = p.shutdown

        def callers_leave_first():  # the callers end before the proxy does: the test judges what
            stop.set()              # they saw while it served, not a stream cut by its exit
            th.join(10)
            shutdown()

        p.shutdown = callers_leave_first
        th.start()
        try:
            p.run()
        finally:
            stop.set()
            th.join(10)
    return json.loads((tmp_path / "promote.json").read_text()), seen


@pytest.mark.slow
def test_a_good_candidate_is_promoted_through_every_stage(tmp_path):
    rec, seen = _promote(tmp_path, ok_script("c", gap=0.002))
    assert rec["outcome"] == "promoted", rec["decisions"]
    acts = [(d["stage"], d["action"]) for d in rec["decisions"]]
    assert [a for a in acts if a[1] in ("advance", "promote")] == [
        ("shadow", "advance"), ("canary_50", "advance"), ("canary_100", "promote")]
    shadow_gate = rec["stages"][0]["gates"][-1]
    assert shadow_gate["pairing"].startswith("paired") and shadow_gate["agreement"]["decision"] == "pass"
    assert shadow_gate["agreement"]["mean_agreement"] == 1.0 and rec["agreement_unit"] == "characters"
    assert rec["callers"]["failed"] == 0 and all(s == 200 for s, _ in seen)
    # each stage's rows (those that finished during it): both sides, in the requests.parquet contract
    t = pq.read_table(tmp_path / rec["stages"][1]["dir"] / "requests.parquet").to_pydict()
    assert {("incumbent", False), ("candidate", False)} <= set(zip(t["side"], t["shadow"]))
    assert rec["stages"][1]["served"]["candidate"] > 0 and rec["stages"][0]["served"]["candidate"] == 0
    tl = rec["timeline"]
    assert len(tl["t_s"]) == len(tl["share"]) == len(tl["candidate"]["p50_ttft_ms"]) > 4
    assert max(tl["share"]) == 1.0
    exp = json.loads((tmp_path / "experiment.json").read_text())
    step7 = next(s for s in exp["steps"] if s["step"] == 7)
    assert step7["ran"] and step7["how"].startswith("promoted")
    assert json.loads((tmp_path / "rollback.json").read_text())["proxy_mode"] == "rollback"
    last = rec["decisions"][-1]
    assert rec["answer"]["lines"][0] == (f"the candidate is promoted at {last['t_s']:.1f} s in stage canary_100: "
                                         f"{last['reason']}")
    assert exp["answer"] == rec["answer"]


@pytest.mark.slow
def test_a_candidate_that_starts_failing_is_rolled_back_by_a_guard(tmp_path):
    def script(body, n):  # fine for a while, then every request breaks before its first token
        return stream(f"c{n}", gap=0.002) if n < 60 else [HEAD_CHUNKED, CLOSE]
    rec, seen = _promote(tmp_path, script)
    assert rec["outcome"] == "rolled_back"
    last = rec["decisions"][-1]
    assert last["action"] == "rollback" and last["reason"].startswith("guard: candidate error rate")
    assert {t["guard"] for t in last["numbers"]["trips"]} >= {"error_rate"}
    bad = [x for x in seen if x != (200, 1)]
    assert rec["callers"]["failed"] == 0 and not bad, (len(bad), len(seen), bad[:5])
    assert rec["timeline"]["mode"][-1] == "rollback"


@pytest.mark.slow  # a proxy process of its own
@pytest.mark.parametrize("stop, outcome", [(RuntimeError("a step failed"), "failed"),
                                           (Terminated(), "interrupted")])
def test_a_promotion_stopped_mid_way_writes_its_record_and_ends_its_parent_failed(tmp_path, monkeypatch, stop,
                                                                                   outcome):
    parent = RecordingLogger()  # the MLflow parent run, with the client the decisions are logged through
    parent.parent_id = "parent"
    parent.client = SimpleNamespace(log_batch=lambda run_id, **kw: parent.calls.append(("batch", run_id)))
    monkeypatch.setattr(lifecycle, "start_parent", lambda cfg, out, **kw: parent)
    monkeypatch.setattr("protocols.promote.run.start_parent", lambda cfg, out, **kw: parent, raising=False)
    port = _free_port()
    with FakeServer(ok_script("i", gap=0.002)) as inc, FakeServer(ok_script("c", gap=0.002)) as cand:
        overrides = ["protocol=promote", f"proxy.incumbent={inc.url}", f"proxy.candidate={cand.url}",
                     f"proxy.port={port}", "protocol.traffic=live", "mlflow.enabled=false", "report.enabled=false",
                     f"output_dir={tmp_path}", "protocol.guard.interval_s=0.05", STAGES, *NOT_LATENCY]
        p = Promotion(compose_config(overrides), overrides)
        ticks, tick = [], p.stage_loop.tick

        def tick_then_stop(*args):  # the third look at the proxy fails (a bug in a step) or is cut by SIGTERM
            tick(*args)
            ticks.append(args[0])
            if len(ticks) == 3:
                raise stop

        p.stage_loop.tick = tick_then_stop
        with pytest.raises((RuntimeError, KeyboardInterrupt)) as got:
            p.run()
    assert type(got.value) is type(stop)  # SIGTERM stays itself (exit 143), not a plain Ctrl-C (130)
    rec = json.loads((tmp_path / "promote.json").read_text())
    assert rec["outcome"] == outcome and len(rec["timeline"]["t_s"]) == 3 and rec["stages"][0]["name"] == "shadow"
    assert rec["answer"]["lines"][0].startswith(f"outcome: {outcome} at 0.0 s in stage shadow")
    exp = json.loads((tmp_path / "experiment.json").read_text())
    assert exp["status"] == outcome and exp["promotion"]["outcome"] == outcome and exp["answer"] == rec["answer"]
    assert ("metrics", {"promoted": 0.0, "rolled_back": 0.0, "stages_run": 1.0, "callers_failed": 0.0}) in parent.calls
    assert ("artifact", "promote.json") in parent.calls and parent.calls[-1] == ("end", "FAILED")


@pytest.mark.parametrize("bad, msg", [
    (["protocol.stages=[{share: 1.0}]"], r"protocol.stages\[0\]: share=1 leaves the incumbent"),
    (["+protocol.gate.margins.p100_ttft_ms=0.1"], "protocol.gate.margins.p100_ttft_ms: not a gate metric"),
    (["protocol.fault.kind=kill"], "protocol.fault.kind=kill needs a candidate launched here"),
    (["proxy.cpus=4096"], r"proxy.cpus='4096': none of these CPUs is available"),
])
def test_bad_promotion_settings_are_refused_by_name(bad, msg):
    from harness.errors import UserError

    o = ["protocol=promote", "proxy.incumbent=http://127.0.0.1:1", "proxy.candidate=http://127.0.0.1:2", *bad]
    with pytest.raises(UserError, match=msg):
        Promotion(compose_config(o), o)
