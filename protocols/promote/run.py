"""``protocol=promote`` (``tokenfactory promote``): step 7 of the seed's protocol, run.

One process drives it (``Promotion.run``):

1. the rollback configuration is written (``rollback.json``: the incumbent, and the command
   that serves everything from it) before anything else starts;
2. the two endpoints: URLs (``proxy.incumbent``, ``proxy.candidate``), or engines launched here
   from override lists (``protocol.incumbent``, ``protocol.candidate``), so a rehearsal runs on
   one machine;
3. the proxy, in a child process (``harness.proxy.process``), in the first stage's mode;
4. traffic: tokenfactory's own load generator replaying the configured workload and load
   through the proxy (``tokenfactory run engine=openai engine.base_url=<proxy>`` in a
   subprocess, the command's own workload/load/SLO/client overrides passed on), or real
   callers (``protocol.traffic=live``);
5. every ``protocol.guard.interval_s``: the rows the proxy finished, the guards (a trip rolls
   back at once), the stage's gate when it is due (``protocols.promote.plan.StageMachine``,
   ``metrics.promotion_gate``), a point of the timeline; a rehearsal's fault
   (``protocol.fault``) is injected into a launched candidate at its time;
6. after the final decision, ``protocol.after_s`` more of the timeline, then everything is
   stopped and the record written: ``promote.json`` (stages, every gate with its numbers,
   decisions, the fault and the time to roll back, the timeline), ``experiment.json`` (step 7
   ran), ``stages/NN_<name>/requests.parquet`` (both sides' rows, the requests.parquet
   contract with ``side`` and ``shadow``), and MLflow (a parent run: the gates' numbers per
   look, each decision, the record as artifacts).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from conf.compose import compose_config
from conf.schema import ConfigError, Proxy, typed, validate
from harness import results_io
from harness.errors import UserError
from harness.experiment_record import experiment_record, run_rows, seven_steps
from harness.finish import finish_run
from harness.parent_run import start_parent
from harness.proxy.pairs import PairBook
from harness.proxy.routing import CANDIDATE, INCUMBENT
from harness.proxy.runtime import check_placement
from metrics.answer import promotion_answer
from metrics.cost import window_cost
from metrics.percentiles import percentile
from metrics.promotion_gate import (
    SideSample,
    agreement_check,
    compare_sides,
    gate_outcome,
    guard_trips,
    look_confidence,
    metric_kind,
)
from protocols.designs import design_of
from protocols.promote.plan import Stage, StageMachine, plan_stages

perf_ns = time.perf_counter_ns
SIDES = (INCUMBENT, CANDIDATE)
# Overrides that are the promotion's own, not the traffic's.
OWN = ("protocol", "proxy", "engine", "output_dir", "experiment", "mlflow", "report", "hydra", "resume")
# ... but these engine keys word the traffic's requests and go with it.
TRAFFIC_ENGINE = ("engine.request_extra", "engine.api", "engine.max_model_len", "engine.exact_output",
                  "engine.continuous_usage", "engine.api_key_env")


def measured(rows) -> list:
    """Rows that say something about the engine: a request cancelled (its caller left, the proxy
    stopped, a rollback moved it to the incumbent) is counted apart, not as the engine's error."""
    return [r for r in rows if r.status != "cancelled"]


def gate_rows(plan, inc_rows, cand_rows) -> tuple[list, list, str]:
    """The rows a stage's gate compares, and how (``metrics.promotion_gate``'s module doc):

    - shadow: the incumbent's callers' requests and the candidate's copies of them: paired;
    - canary with every candidate-served request mirrored (``mirror`` 1), or with every caller on
      the candidate (``share`` 1: the incumbent runs mirrored copies only): the mirrored requests
      on the candidate and their copies on the incumbent, run at the same moments: paired.  The
      incumbent's other requests are not the comparison: at 1-5 % it carries nearly all the
      load (a starved incumbent makes any candidate look good), and the requests that run on
      both sides at once share the host (a real run here: the candidate's requests at p50 TTFT
      12.88 ms against 9.16 ms for the incumbent's own, and 12.90 ms for the same requests'
      copies on the incumbent);
    - canary otherwise: each side's own callers' requests over the same period: unpaired.
    """
    inc, cand = measured(inc_rows), measured(cand_rows)
    if plan.mode == "shadow":
        return [r for r in inc if not r.shadow], [r for r in cand if r.shadow], "paired (same requests)"
    if plan.mirror >= 1.0 or plan.share >= 1.0:
        twins = {r.request_id: r for r in inc if r.shadow}
        served = [r for r in cand if not r.shadow and r.request_id in twins]
        return [twins[r.request_id] for r in served], served, "paired (mirrored requests)"
    return [r for r in inc if not r.shadow], [r for r in cand if not r.shadow], "unpaired (same period)"


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def traffic_overrides(overrides: list[str]) -> list[str]:
    """The command's overrides that shape the traffic (workload, load, SLO, client, request wording)."""
    out = []
    for o in overrides:
        k = _key(o)
        if k.startswith(TRAFFIC_ENGINE) or not k.startswith(OWN):
            out.append(o)
    return out


class _Stage:
    """A stage as it ran: its plan, when it started and ended, its rows per side, its gates."""

    def __init__(self, index: int, plan: Stage, start_ns: int, out: Path):
        self.index, self.plan, self.start_ns, self.end_ns = index, plan, start_ns, None
        self.dir = out / "stages" / f"{index:02d}_{plan.name}"
        self.rows = {s: [] for s in SIDES}
        self.pairs: list = []
        self.gates: list[dict] = []


class Promotion:
    def __init__(self, cfg: DictConfig, overrides: list[str]):
        self.cfg = cfg
        self.overrides = list(overrides)
        try:
            validate(cfg)
            self.stages = plan_stages(cfg.protocol)
            for name in cfg.protocol.gate.margins:
                metric_kind(name)
            check_placement(typed(cfg.proxy, Proxy))  # before any engine starts
        except (ConfigError, ValueError) as e:
            raise UserError(str(e)) from None
        p = cfg.protocol
        self.pcfg = OmegaConf.to_container(cfg.proxy, resolve=True)
        self.launch = {s: list(p[s]) if p[s] else None for s in SIDES}
        for s in SIDES:
            if self.launch[s] is None and not self.pcfg.get(s):
                raise UserError(f"proxy.{s}: the {s}'s URL is needed (or protocol.{s}=[overrides] to launch it here)")
        if p.fault.kind != "none" and self.launch[CANDIDATE] is None:
            raise UserError(f"protocol.fault.kind={p.fault.kind} needs a candidate launched here "
                            "(protocol.candidate=[overrides]): a fault is injected into its process")
        if p.fault.stage is not None and p.fault.stage not in {s.name for s in self.stages}:
            raise UserError(f"protocol.fault.stage={p.fault.stage!r} is not a stage "
                            f"({', '.join(s.name for s in self.stages)})")
        out = cfg.output_dir or os.path.join("results", str(cfg.experiment), results_io.new_run_id())
        self.out = Path(out)
        self.safe_config = results_io.redact(OmegaConf.to_container(cfg, resolve=True))
        self.engines: dict = {}
        self.urls: dict[str, str | None] = {s: self.pcfg.get(s) for s in SIDES}
        self.proxy = None
        self.traffic: subprocess.Popen | None = None
        self.machine = StageMachine(self.stages)
        self.ran: list[_Stage] = []
        self.after: _Stage | None = None
        self.window: dict[str, deque] = {s: deque() for s in SIDES}
        self.timeline: dict = {"t_s": [], "stage": [], "mode": [], "share": [],
                               **{s: {k: [] for k in ("requests", "served", "in_flight", "slo_attainment",
                                                      "error_rate", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms")}
                                  for s in SIDES}}
        self.fault: dict = {"kind": str(p.fault.kind)}
        self.t0_ns = 0
        self.status = "running"
        self.pairs: PairBook | None = None
        self.mlflow = None
        self.looks = 0
        self.rows_total = 0
        self.callers: dict[str, str] = {}    # request id -> ok | failed | cancelled, as the caller saw it
        self.promotion: dict | None = None
        self.promotion_how: str | None = None

    # ------------------------------------------------------------------------------------ helpers
    def t(self, ns: int | None = None) -> float:
        return ((ns if ns is not None else perf_ns()) - self.t0_ns) / 1e9

    @property
    def stage(self) -> _Stage:
        return self.ran[-1]

    def _stage_of(self, arrive_ns: int) -> _Stage | None:
        for st in reversed(self.ran):
            if arrive_ns >= st.start_ns:
                return st if st.end_ns is None or arrive_ns < st.end_ns else None
        return None

    # ------------------------------------------------------------------------------------ run
    def run(self) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        results_io.write_yaml(self.out / results_io.CONFIG, self.safe_config)
        self.write_rollback()
        self.write_experiment()
        self.start_mlflow()
        interrupted = False
        try:
            self.launch_engines()
            self.start_proxy()
            if self.cfg.protocol.traffic == "loadgen":
                self.start_traffic()
            self.loop()
        except KeyboardInterrupt:
            interrupted = True
            self.status = "interrupted"
        finally:
            self.shutdown()
        self.write_record()
        if interrupted:
            raise KeyboardInterrupt
        return self.out

    def write_rollback(self) -> None:
        """Before the first stage: how to serve everything from the incumbent again."""
        inc = self.urls[INCUMBENT]
        cmd = ["tokenfactory", "proxy", f"proxy.incumbent={inc or '<the incumbent launched from protocol.incumbent>'}",
               "proxy.mode=rollback", f"proxy.host={self.pcfg['host']}", f"proxy.port={self.pcfg['port']}"]
        results_io.write_json(self.out / results_io.ROLLBACK, {
            "proxy_mode": "rollback", "incumbent_url": inc, "incumbent_launch_overrides": self.launch[INCUMBENT],
            "incumbent_model": self.pcfg.get("incumbent_model"), "command": cmd,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "note": "everything to the incumbent, nothing copied to the candidate; a promotion's guards apply "
                    "this mode to its running proxy at once"})

    def launch_engines(self) -> None:
        from engines.base import EngineError
        from engines.registry import make_engine

        base = [o for o in self.overrides if not _key(o).startswith(("protocol", "proxy", "engine", "output_dir"))]
        for side in SIDES:
            if self.launch[side] is None:
                continue
            try:
                sub = compose_config(base + self.launch[side])
                validate(sub)
                eng = make_engine(sub.engine, self.out / side)
                (self.out / side).mkdir(parents=True, exist_ok=True)
                print(f"starting the {side}: engine={eng.name} {' '.join(self.launch[side])} ...", flush=True)
                eng.start()
            except (ConfigError, ValueError, EngineError) as e:
                raise UserError(f"protocol.{side}: {e}") from None
            self.engines[side] = eng
            self.urls[side] = eng.base_url
            print(f"{side} ready at {eng.base_url}", flush=True)

    def start_proxy(self) -> None:
        from harness.proxy.process import ProxyProcess

        first = self.stages[0]
        pcfg = {**self.pcfg, **{s: self.urls[s] for s in SIDES}, "mode": first.mode,
                "canary_share": first.share, "mirror": first.mirror}
        if pcfg["port"] == 8080 and "proxy.port" not in {_key(o) for o in self.overrides}:
            pcfg["port"] = 0  # a free port unless one was asked for
        tok = self.tokenizer()
        self.pairs = PairBook(tok)
        st = _Stage(0, first, 0, self.out)
        st.dir.mkdir(parents=True, exist_ok=True)
        self.proxy = ProxyProcess(pcfg, OmegaConf.to_container(self.cfg.slo, resolve=True),
                                  str(st.dir / results_io.REQUESTS))
        try:
            port = self.proxy.start()
        except RuntimeError as e:
            raise UserError(f"proxy: {e}") from None
        self.proxy_url = f"http://{pcfg['host']}:{port}"
        # the first stage starts when the proxy is in its mode
        st.start_ns = self.proxy.set_mode(first.mode, first.share, first.mirror)
        self.t0_ns = st.start_ns
        self.ran.append(st)
        self.machine.start(0.0)
        print(f"proxy at {self.proxy_url}" + (f" ({', '.join(self.proxy.placed)})" if self.proxy.placed else "")
              + f": incumbent {self.urls[INCUMBENT]}, candidate {self.urls[CANDIDATE]}; stage {first.name}", flush=True)

    def tokenizer(self):
        if self.pcfg.get("compare") == "off":
            return None
        name = None
        if INCUMBENT in self.engines:
            name = self.engines[INCUMBENT].tokenizer
        else:
            name = self.cfg.engine.get("tokenizer") or self.cfg.engine.get("model")
        if not name:
            return None
        from loadgen.workloads.prompts import load_tokenizer

        try:
            return load_tokenizer(str(name))
        except ValueError as e:
            raise UserError(str(e)) from None

    def start_traffic(self) -> None:
        cfg = self.cfg
        if INCUMBENT in self.engines:
            eng = self.engines[INCUMBENT]
            model, tok = eng.served_model, eng.tokenizer
        else:
            model = cfg.engine.get("served_model_name") or cfg.engine.get("model")
            tok = cfg.engine.get("tokenizer") or model
        if not model:
            raise UserError("engine.model: the served model's name for the traffic through the proxy "
                            "(and engine.tokenizer to build its prompts), or protocol.incumbent=[...] to launch it")
        extra = traffic_overrides(self.overrides)
        keys = {_key(o) for o in extra}
        if "load.stop_when_saturated" not in keys:  # a promotion's traffic is not a saturation probe
            extra.append("load.stop_when_saturated=false")
        if cfg.load.kind != "trace" and not keys & {"load.duration_s", "load.num_requests"}:
            total = sum(s.max_duration_s for s in self.stages) + float(cfg.protocol.after_s)
            extra += [f"load.duration_s={total:g}", "load.num_requests=null"]
            print(f"note: traffic for up to {total:g} s (the stages' max_duration_s and protocol.after_s); "
                  "give load.duration_s to change it", flush=True)
        cmd = [sys.executable, "-m", "harness.cli", "run", "engine=openai", f"engine.base_url={self.proxy_url}",
               f"engine.model={model}", f"engine.tokenizer={tok}", "protocol=sweep", "protocol.load_points=[]",
               *extra, f"output_dir={self.out / 'traffic'}", f"experiment={cfg.experiment}",
               "mlflow.enabled=false", "report.enabled=false"]
        (self.out / "traffic").mkdir(parents=True, exist_ok=True)
        log = open(self.out / "traffic" / "traffic.log", "w")
        print("traffic: " + " ".join(cmd[3:]), flush=True)
        self.traffic = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._traffic_log = log

    # ------------------------------------------------------------------------------------ the loop
    def loop(self) -> None:
        p = self.cfg.protocol
        tick = float(p.guard.interval_s)
        final_at: float | None = None
        next_tick = perf_ns()
        while True:
            next_tick += int(tick * 1e9)
            time.sleep(max(next_tick - perf_ns(), 0) / 1e9)
            rows, status, gone = self.proxy.drain()
            if rows and not self.rows_total:
                # the first stage starts with the first request (a load generator takes a while to start)
                first = min(r.arrive_ns for r in rows)
                self.ran[0].start_ns = first
                self.machine.started_s = self.t(first)
                self.machine.decisions[0].t_s = self.t(first)
            for r in rows:
                self.add_row(r)
            now = perf_ns()
            t = self.t(now)
            self.maybe_fault(t)
            if not self.machine.done:
                self.check(t, status or {})
            self.tick(t, status or {}, len(rows))
            if self.machine.done and final_at is None:
                final_at = t
            if final_at is not None and t - final_at >= float(p.after_s):
                return
            if gone:
                if not self.machine.done:
                    self.machine.on_end(t, "the proxy process ended")
                return
            if self.traffic is not None and self.traffic.poll() is not None and final_at is None:
                rows, _, _ = self.proxy.drain()
                for r in rows:
                    self.add_row(r)
                self.machine.on_end(t, f"the traffic ended (exit {self.traffic.returncode}) before a final decision; "
                                       f"see {self.out / 'traffic' / 'traffic.log'}")
                print(f"[{t:7.1f} s] {self.machine.decisions[-1].reason}", flush=True)
                return

    def add_row(self, r) -> None:
        self.rows_total += 1
        if not r.shadow:  # what the caller got: ok once any of its rows is; cancelled ones (the caller left,
            # the proxy stopped, a rollback moved it to the incumbent) are not failures
            was = self.callers.get(r.request_id)
            now_ = "ok" if r.status == "ok" else ("cancelled" if r.status == "cancelled" else "failed")
            self.callers[r.request_id] = "ok" if "ok" in (was, now_) else (now_ if was in (None, "cancelled") else was)
        self.window[r.side].append(r)
        st = self._stage_of(r.arrive_ns)
        if st is not None:
            st.rows[r.side].append(r)
        elif self.after is not None and r.arrive_ns >= self.after.start_ns:
            self.after.rows[r.side].append(r)
        if r.side == CANDIDATE and r.status != "ok" and "first_candidate_failure_s" not in self.fault \
                and self.fault.get("injected_s") is not None:
            self.fault["first_candidate_failure_s"] = self.t(r.done_ns or perf_ns())
        if r.compare and self.pairs is not None:
            got = self.pairs.add(r.request_id, r.side, r.text, r.status == "ok")
            if got is not None and st is not None:
                st.pairs.append(got)

    def maybe_fault(self, t: float) -> None:
        f = self.cfg.protocol.fault
        if f.kind == "none" or "injected_s" in self.fault:
            return
        base = self.t(self.ran[0].start_ns) if self.rows_total else math.inf  # from the first request
        if f.stage is not None:
            st = next((s for s in self.ran if s.plan.name == f.stage), None)
            if st is None:
                return
            base = self.t(st.start_ns)
        if t < base + float(f.at_s) or self.machine.done:
            return
        eng = self.engines[CANDIDATE]
        pid = eng.process.pid if eng.process is not None else None
        if pid is None:
            return
        sig = signal.SIGKILL if f.kind == "kill" else signal.SIGSTOP
        at = perf_ns()
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        self.fault.update(injected_s=self.t(at), stage=self.stage.plan.name, pid=pid,
                          signal="SIGKILL" if f.kind == "kill" else "SIGSTOP")
        print(f"[{self.t(at):7.1f} s] fault: {f.kind} the candidate (process group {pid})", flush=True)

    def _window(self, side: str, since_ns: int) -> SideSample:
        w = self.window[side]
        while w and (w[0].done_ns or 0) < since_ns:
            w.popleft()
        return SideSample.from_rows(measured(w))

    def check(self, t: float, status: dict) -> None:
        g = self.cfg.protocol.guard
        since = max(perf_ns() - int(float(g.window_s) * 1e9), self.stage.start_ns)
        inc, cand = self._window(INCUMBENT, since), self._window(CANDIDATE, since)
        trips = guard_trips(inc, cand, min_requests=int(g.min_requests),
                            max_error_rate_increase=float(g.max_error_rate_increase),
                            max_attainment_drop=float(g.max_attainment_drop), max_ttft_ratio=float(g.max_ttft_ratio),
                            stall_s=float(g.stall_s), ttft_floor_ms=float(g.ttft_floor_ms),
                            min_latency_requests=int(g.min_latency_requests),
                            candidate_oldest_wait_s=float((status.get(CANDIDATE) or [0, 0.0])[1]))
        if trips:
            d = self.machine.on_guard(t, trips)
            self.rollback(d)
            return
        st = self.stage
        n_cand = len(st.rows[CANDIDATE])
        if self.machine.gate_due(t, n_cand):
            gate = self.gate(st, t)
            before = self.machine.i
            d = self.machine.on_gate(t, gate["outcome"], gate["reasons"], {"gate": len(st.gates) - 1})
            print(f"[{t:7.1f} s] {st.plan.name}: gate look {gate['look']} ({gate['confidence']:.4g}) -> "
                  f"{d.action if d.action != 'start' else 'advance'}: {'; '.join(gate['reasons'])[:600]}", flush=True)
            self.log_gate(st, gate)
            if d.action == "rollback":
                self.rollback(d)
            elif self.machine.state == "promoted":
                self.finish_stage(promoted=True)
            elif self.machine.i != before:
                self.next_stage()

    def gate(self, st: _Stage, t: float) -> dict:
        p = self.cfg.protocol
        gp = p.gate
        look = len(st.gates) + 1
        conf = look_confidence(float(gp.confidence), look)
        inc_rows, cand_rows, pairing = gate_rows(st.plan, st.rows[INCUMBENT], st.rows[CANDIDATE])
        inc, cand = SideSample.from_rows(inc_rows), SideSample.from_rows(cand_rows)
        stage_s = max(t - self.t(st.start_ns), 1e-9)
        distinct = len({r.request_id for s in SIDES for r in st.rows[s]})
        cost = window_cost(OmegaConf.to_container(self.cfg.cost, resolve=True), stage_s)["cost_total"]
        per_request = cost / distinct if distinct and cost > 0 else math.nan
        self.looks += 1
        metrics = compare_sides(inc, cand, OmegaConf.to_container(gp.margins, resolve=True),
                                paired=pairing.startswith("paired"), label=pairing, confidence=conf,
                                blocks=int(gp.blocks),
                                resamples=int(gp.resamples), seed=int(self.cfg.seed) + self.looks,
                                cost_per_request=per_request, cost_factor=float(gp.candidate_cost_factor))
        agreement = None
        if self.pcfg.get("compare") != "off":
            agreement = agreement_check(st.pairs, float(gp.min_agreement), confidence=conf,
                                        min_pairs=int(gp.min_pairs), required=st.plan.mode == "shadow",
                                        resamples=int(gp.resamples), seed=int(self.cfg.seed) + self.looks)
            agreement["unit"] = self.pairs.unit if self.pairs else None
        outcome, reasons = gate_outcome(metrics, agreement)
        gate = {"t_s": t, "look": look, "confidence": conf, "stage_s": stage_s, "outcome": outcome,
                "reasons": reasons, "requests": {INCUMBENT: inc.n, CANDIDATE: cand.n},
                "pairing": pairing,
                "cost_window": cost, "metrics": metrics, "agreement": agreement}
        st.gates.append(gate)
        return gate

    def next_stage(self) -> None:
        prev = self.stage
        plan = self.machine.stage
        st = _Stage(len(self.ran), plan, 0, self.out)
        st.dir.mkdir(parents=True, exist_ok=True)
        self.proxy.rotate(st.dir / results_io.REQUESTS)
        st.start_ns = self.proxy.set_mode(plan.mode, plan.share, plan.mirror)
        prev.end_ns = st.start_ns
        self.machine.started_s = self.t(st.start_ns)
        self.ran.append(st)
        print(f"[{self.t(st.start_ns):7.1f} s] {self.machine.decisions[-1].reason}", flush=True)

    def rollback(self, d) -> None:
        at = self.proxy.set_mode("rollback", 0.0, 0.0)
        d.numbers["applied_t_s"] = self.t(at)
        self.stage.end_ns = at
        self.after = _Stage(len(self.ran), Stage("after_rollback", "rollback", 0, 0, 0, 0, 0), at, self.out)
        self.after.dir.mkdir(parents=True, exist_ok=True)
        self.proxy.rotate(self.after.dir / results_io.REQUESTS)
        if "injected_s" in self.fault:
            self.fault.update(rollback_decided_s=d.t_s, rollback_applied_s=self.t(at),
                              fault_to_rollback_s=self.t(at) - self.fault["injected_s"])
        print(f"[{self.t(at):7.1f} s] ROLLBACK ({d.stage}): {d.reason[:800]}", flush=True)

    def finish_stage(self, promoted: bool) -> None:
        plan = self.stage.plan
        at = self.proxy.set_mode("canary", 1.0, 0.0) if promoted else perf_ns()
        self.stage.end_ns = at
        self.after = _Stage(len(self.ran), Stage("after_promotion", "canary", 1.0, 0, 0, 0, 0), at, self.out)
        self.after.dir.mkdir(parents=True, exist_ok=True)
        self.proxy.rotate(self.after.dir / results_io.REQUESTS)
        print(f"[{self.t(at):7.1f} s] PROMOTED after stage {plan.name}: every caller on the candidate", flush=True)

    def tick(self, t: float, status: dict, n_rows: int) -> None:
        tl = self.timeline
        since = perf_ns() - int(float(self.cfg.protocol.guard.window_s) * 1e9)
        tick_ns = int(float(self.cfg.protocol.guard.interval_s) * 1e9)
        mode, share = (self.machine.stage.mode, self.machine.stage.share)
        if self.machine.state == "rolled_back":
            mode, share = "rollback", 0.0
        elif self.machine.state == "promoted":
            mode, share = "canary", 1.0
        tl["t_s"].append(round(t, 3))
        tl["stage"].append(self.machine.stage.name if self.machine.state == "running" else self.machine.state)
        tl["mode"].append(mode)
        tl["share"].append(share)
        now = perf_ns()
        for side in SIDES:
            rows = measured(r for r in self.window[side] if (r.done_ns or 0) >= since)
            recent = [r for r in rows if (r.done_ns or 0) >= now - tick_ns]
            s = tl[side]
            s["requests"].append(len(recent))
            s["served"].append(sum(not r.shadow for r in recent))
            s["in_flight"].append(int((status.get(side) or [0])[0]))
            n = len(rows)
            ttft = np.array([r.ttft_s for r in rows if r.ttft_s is not None], dtype=np.float64)
            tpot = np.array([r.tpot_s for r in rows if r.tpot_s is not None], dtype=np.float64)
            s["slo_attainment"].append(sum(bool(r.slo_ok) for r in rows) / n if n else None)
            s["error_rate"].append(sum(r.status != "ok" for r in rows) / n if n else None)
            s["p50_ttft_ms"].append(percentile(ttft, 50) * 1e3 if ttft.size else None)
            s["p99_ttft_ms"].append(percentile(ttft, 99) * 1e3 if ttft.size else None)
            s["p50_tpot_ms"].append(percentile(tpot, 50) * 1e3 if tpot.size else None)

    # ------------------------------------------------------------------------------------ the end
    def shutdown(self) -> None:
        if self.traffic is not None:
            if self.traffic.poll() is None:
                try:
                    os.killpg(self.traffic.pid, signal.SIGINT)
                    self.traffic.wait(60)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(self.traffic.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    self.traffic.wait(10)
            self._traffic_log.close()
        if self.proxy is not None:
            rows, _, _ = self.proxy.drain()
            for r in rows:
                self.add_row(r)
            self.proxy.stop()
            rows, _, _ = self.proxy.drain()
            for r in rows:
                self.add_row(r)
        for side, eng in self.engines.items():
            if side == CANDIDATE and self.fault.get("signal") == "SIGSTOP" and eng.process is not None:
                try:
                    os.killpg(eng.process.pid, signal.SIGCONT)  # a paused engine cannot take SIGTERM
                except ProcessLookupError:
                    pass
            eng.stop()

    def promotion_record(self) -> dict:
        state = self.status if self.status == "interrupted" else self.machine.state
        stages = []
        for st in self.ran:
            d = {**{k: getattr(st.plan, k) for k in ("name", "mode", "share", "mirror", "min_requests",
                                                      "min_duration_s", "max_duration_s")},
                 "dir": str(st.dir.relative_to(self.out)), "started_s": self.t(st.start_ns),
                 "ended_s": self.t(st.end_ns) if st.end_ns else None,
                 "requests": {s: len(st.rows[s]) for s in SIDES},
                 "served": {s: sum(not r.shadow for r in st.rows[s]) for s in SIDES},
                 "compared_pairs": len(st.pairs), "gates": st.gates}
            stages.append(d)
        failed_callers = sum(v == "failed" for v in self.callers.values())
        return {
            "outcome": state, "incumbent": {"url": self.urls[INCUMBENT], "launch": self.launch[INCUMBENT]},
            "candidate": {"url": self.urls[CANDIDATE], "launch": self.launch[CANDIDATE]},
            "proxy": {k: self.pcfg.get(k) for k in ("sticky", "compare", "incumbent_model", "candidate_model")},
            "traffic": self.cfg.protocol.traffic, "stages_planned": [s.name for s in self.stages],
            "stages": stages, "decisions": [d.to_dict() for d in self.machine.decisions],
            "fault": self.fault, "failovers": self.proxy.failovers if self.proxy else {},
            "callers": {"requests": len(self.callers), "failed": failed_callers,
                        "cancelled": sum(v == "cancelled" for v in self.callers.values())},
            "rows": self.rows_total, "agreement_unit": self.pairs.unit if self.pairs else None,
            "gate": OmegaConf.to_container(self.cfg.protocol.gate, resolve=True),
            "guard": OmegaConf.to_container(self.cfg.protocol.guard, resolve=True),
            "rollback_config": results_io.ROLLBACK, "timeline": self.timeline,
        }

    def write_record(self) -> None:
        rec = self.promotion_record()
        self.promotion = rec
        last = self.machine.decisions[-1] if self.machine.decisions else None
        self.promotion_how = (f"{rec['outcome']}: {len(rec['stages'])} of {len(self.stages)} stage(s) run, "
                              f"{sum(len(s['gates']) for s in rec['stages'])} gate(s); last decision "
                              f"{last.action if last else 'none'} ({last.stage if last else ''}) (promote.json)")
        rec["answer"] = promotion_answer(rec).to_dict()
        results_io.write_json(self.out / results_io.PROMOTION, rec)
        self.write_experiment()
        self.log_decisions(rec)
        print(self.describe(rec), flush=True)
        fault = rec["fault"]
        finish_run(self.cfg, self.out, self.mlflow, metrics={
            "promoted": float(rec["outcome"] == "promoted"), "rolled_back": float(rec["outcome"] == "rolled_back"),
            "stages_run": float(len(rec["stages"])), "callers_failed": float(rec["callers"]["failed"]),
            **({"fault_to_rollback_s": fault["fault_to_rollback_s"]} if "fault_to_rollback_s" in fault else {})},
            artifacts=(results_io.PROMOTION, results_io.ROLLBACK, results_io.EXPERIMENT, results_io.CONFIG),
            report=self.render_report, answer=rec,
            end="FINISHED" if rec["outcome"] in ("promoted", "rolled_back") else "FAILED")

    def render_report(self) -> None:
        """The promotion's timeline figure (printed, not logged: None)."""
        try:
            from harness.report import figures_promotion
        except ImportError:  # a report package without the figure
            return
        try:
            print(f"promotion timeline: {figures_promotion.write(self.out)}", flush=True)
        except (OSError, ValueError, ImportError) as e:
            print(f"note: promotion timeline not drawn: {e}", flush=True)

    def describe(self, rec: dict) -> str:
        lines = [f"promotion {rec['outcome'].upper()}: callers {rec['callers']['requests']} requests, "
                 f"{rec['callers']['failed']} failed; failovers {rec['failovers']}"]
        for d in rec["decisions"]:
            lines.append(f"  {d['t_s']:7.1f} s  {d['stage']:<14} {d['action']:<8} {d['reason'][:300]}")
        if rec["fault"].get("fault_to_rollback_s") is not None:
            lines.append(f"  fault ({rec['fault']['kind']}) at {rec['fault']['injected_s']:.1f} s -> rollback applied "
                         f"at {rec['fault']['rollback_applied_s']:.1f} s: {rec['fault']['fault_to_rollback_s']:.2f} s")
        return "\n".join(lines)

    def write_experiment(self) -> None:
        runs = run_rows(self.out) if self.out.exists() else []
        status = ("complete" if self.promotion and self.promotion["outcome"] in ("promoted", "rolled_back")
                  else ("running" if self.promotion is None else str(self.promotion["outcome"])))
        steps = seven_steps(self.cfg, design_of(self.cfg), bool(runs), points=1, configs=len(SIDES),
                            promotion_how=self.promotion_how)
        rec = experiment_record(
            self.cfg, status=status, out=self.out, overrides=self.overrides,
            configs={s: self.launch[s] if self.launch[s] else [self.urls[s]] for s in SIDES}, baseline=INCUMBENT,
            steps=steps, stages=[s.__dict__ for s in self.stages],
            promotion=None if self.promotion is None else {
                k: self.promotion[k] for k in ("outcome", "decisions", "fault", "callers", "failovers")})
        if self.promotion is not None and self.promotion.get("answer"):
            rec["answer"] = self.promotion["answer"]
        results_io.write_json(self.out / results_io.EXPERIMENT, rec)

    # ------------------------------------------------------------------------------------ MLflow
    def start_mlflow(self) -> None:
        self.mlflow = start_parent(self.cfg, self.out, tags={"tokenfactory.kind": "promotion"}, strict=True,
                                   resume=False)

    def log_gate(self, st: _Stage, gate: dict) -> None:
        if self.mlflow is None:
            return
        from mlflow.entities import Metric, RunTag

        ts = int(time.time() * 1000)
        step = self.looks
        ms = [Metric("gate.stage_index", float(st.index), ts, step), Metric("gate.t_s", gate["t_s"], ts, step),
              Metric("gate.advance", float(gate["outcome"] == "advance"), ts, step)]
        for name, v in gate["metrics"].items():
            for k in ("incumbent", "candidate", "difference", "low", "high"):
                x = v.get(k)
                if isinstance(x, (int, float)) and math.isfinite(x):
                    ms.append(Metric(f"gate.{name}.{k}", float(x), ts, step))
        a = gate.get("agreement") or {}
        for k in ("mean_agreement", "low", "high"):
            x = a.get(k)
            if isinstance(x, (int, float)) and math.isfinite(x):
                ms.append(Metric(f"gate.token_agreement.{k}", float(x), ts, step))
        self.mlflow.client.log_batch(self.mlflow.parent_id, metrics=ms, tags=[RunTag(
            f"gate.{step:02d}", f"{st.plan.name} look {gate['look']}: {gate['outcome']}: "
                                f"{'; '.join(gate['reasons'])}"[:5000])])

    def log_decisions(self, rec: dict) -> None:
        """The outcome and each decision as tags of the parent run (its metrics, files and end:
        ``harness.finish``)."""
        if self.mlflow is None:
            return
        from mlflow.entities import RunTag

        tags = [RunTag("promotion.outcome", rec["outcome"])]
        tags += [RunTag(f"decision.{i:02d}", f"{d['t_s']:.1f}s {d['stage']} {d['action']}: {d['reason']}"[:5000])
                 for i, d in enumerate(rec["decisions"])]
        self.mlflow.client.log_batch(self.mlflow.parent_id, tags=tags)


def run_promotion(cfg: DictConfig, overrides: list[str]) -> Path:
    return Promotion(cfg, overrides).run()
