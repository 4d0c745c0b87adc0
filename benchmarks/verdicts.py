"""How often tokenfactory's verdicts are wrong, measured live on engines whose truth is known.

    python benchmarks/verdicts.py --row compare|gate|slo_search|ablation [--case ...] [--trials N] [--seed 0]
        [--budget-s S] [--adjust none|bonferroni] [--json OUT]   (docs/measured/verdicts.md)

Every trial runs the real protocol end to end in this process (``protocols.registry`` and
``harness.commands.track``, as ``tokenfactory run`` and ``tokenfactory track`` do) against the
fake engine of the tests run as a real process (``tests/fake_engine_process.py``: a fixed TTFT
and inter-token gap, ``--max-num-seqs`` slots with a FIFO queue, ``--error-rate``), launched by
the harness as ``engine=vllm engine.command=[...]``, fresh wherever the protocol launches one.
Nothing is resampled: launch-to-launch spread and the host's noise are whatever the machine gives.

Rows (the truth in brackets):

- ``compare``: ``protocol=compare`` of two configs, 3 blocks (the default repeats; ``--repeats``
  sets ``protocol.repeats``), each block launching both fresh.  ``--case identical`` (both the
  same engine: every winner is false) counts false winners per verdict (each metric's) and per
  family (a trial with any winner, the default adjustment); ``--case ttft5`` / ``ttft10`` (the
  second config's engine TTFT 5 % / 10 % longer) counts how often p50 TTFT names the faster
  config (the power), beside what the comparison said its blocks could find there
  (``sensitivity``: the chance to find 5 % and 10 % at its blocks, the blocks each needs).
- ``gate``: two experiments of one tracked benchmark, each launching its engine separately
  (``track=NAME``, MLflow), then ``tokenfactory track NAME --gate``.  ``identical``: a failed gate
  is a false alarm; ``ttft10`` (newest's TTFT 10 % longer) and ``errors5`` (newest answers 5 % of
  requests with HTTP 500): a passed gate is a missed regression.
- ``ablation``: ``protocol=ablation`` of two factors on the fake, each adding a known TTFT (50 and
  100 ms on 20), ``--repeats`` blocks (3, the default): the effects add in milliseconds, so the
  interaction of the ratios on p50 TTFT is known from the baseline's measured TTFT
  (``true_interaction``); a trial is wrong when the interaction's interval misses it (coverage).
- ``slo_search``: ``protocol.search=slo`` (bisection, tolerance 10 %) on an engine of 2 slots
  whose requests each hold a slot 100 ms: the true highest constant rate meeting p99 TTFT <= 100 ms
  is computed from that queue (``true_max_rate``); a search is right when its answer is within one
  probe step (the tolerance x the truth) of it.

Each row prints its stated level, trials, wrong verdicts, the rate with its Clopper-Pearson 95 %
interval, and whether the level holds (``pass``: the interval's upper end within it; ``fail``: its
lower end beyond it; ``open``: the sample cannot tell).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness import results_io  # noqa: E402

PY = sys.executable
TRACK = "verdicts"
# the fake engine: TTFT 20 ms, 5 ms between tokens, 8 tokens (a request takes 55 ms)
ENGINE = ["--ttft-ms", "20", "--gap-ms", "5"]
LOAD = ["workload.input_tokens=32", "workload.output_tokens=8", "load=constant", "load.num_requests=16",
        "load.warmup_requests=0", "protocol.load_points=[16]"]
# the slot-limited engine of the SLO search: 2 slots, 50 ms + 5 x 10 ms per request of 6 tokens
SLOTS, SEARCH_TTFT_MS, SEARCH_GAP_MS, SEARCH_TOKENS, SEARCH_SLO_MS, SEARCH_S = 2, 50.0, 10.0, 6, 100.0, 2.0
SEARCH_TOLERANCE = 0.1


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of k successes in n trials."""
    # imported here, not at the top: the telemetry process of every session (spawned) runs this
    # script's top again, and scipy.stats cost it 0.8 s of CPU each launch
    from scipy.stats import beta
    a = (1 - confidence) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


@dataclass
class Row:
    """One line of the table: wrong verdicts of ``trials``, against ``level`` (the stated rate of
    wrong verdicts: at most it for false winners and alarms, the miss rate for power)."""
    name: str
    level: float
    trials: int
    wrong: int
    note: str = ""

    def judged(self) -> tuple[float, float, float, str]:
        rate = self.wrong / self.trials if self.trials else math.nan
        lo, hi = clopper_pearson(self.wrong, self.trials) if self.trials else (math.nan, math.nan)
        status = "pass" if hi <= self.level else ("fail" if lo > self.level else "open")
        return rate, lo, hi, status

    def line(self) -> str:
        rate, lo, hi, status = self.judged()
        return (f"{self.name:<44} {self.level:>6.0%} {self.trials:>6} {self.wrong:>6} {rate:>7.1%} "
                f"[{lo:5.1%}, {hi:5.1%}]  {status}{'  ' + self.note if self.note else ''}")


HEADER = f"{'verdict':<44} {'level':>6} {'trials':>6} {'wrong':>6} {'rate':>7} {'95 % interval':<16}  holds"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tokenizer() -> str:
    from engines.tiny_model import ensure_tiny_model
    return str(ensure_tiny_model())


def engine_overrides(port: int, out: Path, fake_args: list[str]) -> list[str]:
    """A fake engine process the harness launches (and stops) itself, as it would vLLM."""
    cmd = ",".join([PY, "-m", "tests.fake_engine_process", "--port", str(port)])
    extra = ",".join(fake_args)
    return ["engine=vllm", f"engine.port={port}", f"engine.command=[{cmd}]", f"engine.extra_args=[{extra}]",
            "engine.model=fake", f"engine.tokenizer={tokenizer()}", "engine.continuous_usage=false",
            "progress=false", "report.enabled=false", "telemetry.idle_baseline_s=0", f"output_dir={out}"]


def run_experiment(overrides: list[str]) -> None:
    """``tokenfactory run OVERRIDES`` in this process, its console kept quiet."""
    from hydra import compose, initialize_config_module

    from protocols.registry import protocol_experiment
    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with contextlib.redirect_stdout(io.StringIO()) as buf:
        try:
            protocol_experiment(cfg, overrides=overrides).run()
        except BaseException:
            sys.stderr.write(buf.getvalue()[-4000:])
            raise


# ------------------------------------------------------------------------------------ compare
COMPARE_CASES = {"identical": "20", "ttft5": "21", "ttft10": "22"}


def compare_trial(tmp: Path, case: str, seed: int, extra: tuple[str, ...] = ()) -> dict:
    """One comparison of two fake engines (3 blocks, every config launched fresh in each)."""
    out, port = tmp / "cmp", free_port()
    slow = COMPARE_CASES[case]
    base = ["--gap-ms", "5", "--ttft-ms"]
    configs = (f'protocol.configs={{a: ["engine.extra_args=[{",".join(base + ["20"])}]"], '
               f'b: ["engine.extra_args=[{",".join(base + [slow])}]"]}}')
    run_experiment(["protocol=compare", *engine_overrides(port, out, ENGINE), *LOAD, "mlflow.enabled=false",
                    configs, f"seed={seed}", f"workload.seed={seed}", *extra])
    doc = json.loads((out / results_io.COMPARISON).read_text())
    judged = {m: v["vs_baseline"]["b"] for m, v in doc["points"][0]["metrics"].items()
              if "b" in v.get("vs_baseline", {})}
    verdicts = {m: v["verdict"] for m, v in judged.items()}
    sens = judged.get("p50_ttft_ms", {}).get("sensitivity") or {}  # what its blocks could find, as it said
    verdicts[POWER] = {k: sens.get(k) for k in ("blocks", "spread", "detectable", "power_at", "blocks_for")}
    verdicts[SESSIONS] = sessions_of(out)
    # a winner's interval, so a false one can be traced to its blocks (``_sessions``' metrics)
    verdicts[WINNERS] = {m: v["text"] for m, v in judged.items() if v["verdict"] in ("a_better", "b_better")}
    shutil.rmtree(out)
    return verdicts


SESSIONS = "_sessions"  # a trial's sessions, in the order they ran: what its cost window held
WINNERS = "_winners"  # each winner's verdict text: its difference and interval
POWER = "_power"  # p50 TTFT's sensitivity: the blocks, spread, detectable difference, blocks 5 % and 10 % need
SESSION_METRICS = ("cost_per_mtok_good", "p50_ttft_ms", "p99_itl_ms")


def sessions_of(out: Path) -> list[dict]:
    """Each session's cost window: its seconds, the engine's start-up, the harness's preparation
    between the engine's readiness and the first request, and the load's span."""
    import pyarrow.parquet as pq
    blocks = json.loads((out / results_io.EXPERIMENT).read_text())["blocks"]
    order = [(b["block"], c) for b in blocks for c in b["order"]]
    rows = []
    for block, config in order:
        for f in sorted((out / config / f"block{block}").glob("*/summary.json")):
            d = json.loads(f.read_text())
            req = pq.read_table(f.with_name(results_io.REQUESTS), columns=["sent_ns", "done_ns"])
            w0 = d["window_start_ns"]
            first, last = (min(req.column("sent_ns").to_pylist()) - w0) / 1e9, (max(req.column("done_ns").to_pylist())
                                                                                 - w0) / 1e9
            rows.append({"config": config, "block": block, "window_s": round(d["window_s"], 3),
                         "startup_s": round(d.get("engine_startup_s") or 0, 3),
                         "prepare_s": round(first - (d.get("engine_startup_s") or 0), 3),
                         "load_s": round(last - first, 3), "after_s": round(d["window_s"] - last, 3),
                         **{m: d.get(m) for m in SESSION_METRICS}, "good": d.get("good_output_tokens")})
    return rows


def compare_rows(trials: list[dict], case: str) -> list[Row]:
    stated = [t.get(POWER) or {} for t in trials]
    trials = [{m: v for m, v in t.items() if m not in (SESSIONS, WINNERS, POWER)} for t in trials]
    if case == "identical":
        judged = [v for t in trials for v in t.values() if v != "insufficient_data"]
        per_verdict = sum(v in ("a_better", "b_better") for v in judged)
        per_family = sum(any(v in ("a_better", "b_better") for v in t.values()) for t in trials)
        metrics = {m for t in trials for m, v in t.items() if v in ("a_better", "b_better")}
        return [Row("compare identical: false winner, per verdict", 0.05, len(judged), per_verdict),
                Row("compare identical: false winner, per family", 0.05, len(trials), per_family,
                    f"metrics with a false winner: {', '.join(sorted(metrics)) or 'none'}")]
    missed = sum(t.get("p50_ttft_ms") != "a_better" for t in trials)
    wrong_way = sum(t.get("p50_ttft_ms") == "b_better" for t in trials)
    # a stated power of 80 %: at most 20 % missed
    return [Row(f"compare {case}: p50 TTFT difference missed", 0.20, len(trials), missed,
                f"named the slower config: {wrong_way}; {stated_power(stated)}")]


def stated_power(stated: list[dict]) -> str:
    """What the comparisons said of p50 TTFT: the chance to find 5 % and 10 % at their blocks, and
    the blocks each needs (medians over the trials)."""
    import numpy as np

    def med(key: str, size: str) -> float:
        v = [float(s[key][size]) for s in stated if (s.get(key) or {}).get(size) is not None]
        return float(np.median(v)) if v else math.nan
    spread = [s["spread"] for s in stated if s.get("spread") is not None]
    return (f"stated (medians): log spread {float(np.median(spread)) if spread else math.nan:.3f} a block; "
            f"found 80 % of the time at {med('blocks_for', '0.05'):.0f} blocks for 5 %, {med('blocks_for', '0.1'):.0f} "
            f"for 10 %; chance at these blocks {med('power_at', '0.05'):.0%} and {med('power_at', '0.1'):.0%}")


# ------------------------------------------------------------------------------------ gate
GATE_CASES = {"identical": [], "ttft10": ["--ttft-ms", "22"], "errors5": ["--error-rate", "0.05"]}


def mlflow_template(tmp: Path) -> Path:
    """An empty MLflow store with its tables made once (creating them takes seconds)."""
    from mlflow.tracking import MlflowClient
    db = tmp / "template.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()
    return db


def gate_trial(tmp: Path, template: Path, case: str, seed: int, repeats: int) -> int:
    """Two separately launched builds of one tracked benchmark, then the gate: its exit code."""
    from harness.commands.track import main as track_main
    db = tmp / f"mlflow-{seed}.db"  # a name of its own: MLflow keeps its store of a URI open
    shutil.copy(template, db)
    uri = f"sqlite:///{db}"
    for i, fake in enumerate(([], GATE_CASES[case])):
        args = [*ENGINE, *fake, "--seed", str(seed * 2 + i)]
        # the fake's own flags come last and win (argparse keeps the last of a repeated flag)
        run_experiment([*engine_overrides(free_port(), tmp / f"e{i}", args), *LOAD, f"protocol.repeats={repeats}",
                        f"mlflow.tracking_uri={uri}", f"track={TRACK}", f"track_version=build-{i}",
                        f"workload.seed={seed}"])
    with contextlib.redirect_stdout(io.StringIO()):
        code = track_main([TRACK, "--tracking-uri", uri, "--out", str(tmp / "track"), "--gate"])
    for p in (tmp / "e0", tmp / "e1", tmp / "track", db):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return code


def gate_rows(codes: list[int], case: str) -> list[Row]:
    cannot = sum(c == 3 for c in codes)
    if case == "identical":
        return [Row("gate identical builds: false alarm (exit 1)", 0.05, len(codes), sum(c == 1 for c in codes),
                    f"cannot judge (exit 3): {cannot}")]
    return [Row(f"gate {case}: regression missed (exit != 1)", 0.20, len(codes), sum(c != 1 for c in codes),
                f"cannot judge (exit 3): {cannot}")]


# ------------------------------------------------------------------------------------ SLO search
def queue_ttft_ms(rate: float, slots: int, service_s: float, first_ms: float, n: int) -> list[float]:
    """TTFT of each of n requests arriving every 1/rate s at a FIFO server of ``slots`` slots
    that holds each for ``service_s`` (its first token ``first_ms`` after it gets one)."""
    free = [0.0] * slots
    out = []
    for k in range(n):
        t = k / rate
        i = min(range(slots), key=free.__getitem__)
        start = max(t, free[i])
        free[i] = start + service_s
        out.append((start - t) * 1e3 + first_ms)
    return out


def true_max_rate(percentile: float = 99.0) -> float:
    """The highest constant rate (to 0.01 req/s) at which the run's p99 TTFT meets the SLO."""
    import numpy as np
    service = (SEARCH_TTFT_MS + SEARCH_GAP_MS * (SEARCH_TOKENS - 1)) / 1e3

    def holds(rate: float) -> bool:
        n = max(int(round(rate * SEARCH_S)), 1)
        return float(np.percentile(queue_ttft_ms(rate, SLOTS, service, SEARCH_TTFT_MS, n), percentile)) \
            <= SEARCH_SLO_MS
    lo, hi = 1.0, 100.0
    while hi - lo > 0.01:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo


def slo_trial(tmp: Path, seed: int, extra: tuple[str, ...] = ()) -> dict:
    out = tmp / "search"
    fake = ["--ttft-ms", str(SEARCH_TTFT_MS), "--gap-ms", str(SEARCH_GAP_MS), "--max-num-seqs", str(SLOTS)]
    run_experiment([*engine_overrides(free_port(), out, fake), "workload.input_tokens=32",
                    f"workload.output_tokens={SEARCH_TOKENS}", "load=constant", "load.num_requests=null",
                    f"load.duration_s={SEARCH_S:g}", "load.warmup_requests=0", "protocol.load_points=[]",
                    "protocol.search=slo", "protocol.search_low=4", "protocol.search_high=40",
                    f"protocol.search_tolerance={SEARCH_TOLERANCE}", f"slo.ttft_ms={SEARCH_SLO_MS:g}",
                    "slo.tpot_ms=null", "mlflow.enabled=false", f"workload.seed={seed}", *extra])
    found = json.loads((out / "search.json").read_text())
    found["probe_figures"] = probe_figures(out, found["probes"])
    shutil.rmtree(out)
    return found


def probe_figures(out: Path, probes: list[dict]) -> list[str]:
    """Each probe as the trial's log shows it: load (its re-measurement), met or missed, p99 TTFT,
    and how many of its requests were over the SLO (the evidence its verdict rests on)."""
    shown = []
    for p in probes:
        found = [f for f in out.rglob(results_io.SUMMARY) if f.parent.as_posix().endswith(p["run_dir"])]
        m = json.loads(found[0].read_text()) if found else {}
        n = int(m.get("completed") or 0) + int(m.get("failed") or 0)
        over = round((1 - float(m.get("slo_attainment") or 0)) * n) if m else -1
        shown.append(f"{p['load']:g}{'r' * p.get('recheck', 0)} {'ok' if p['passed'] else 'MISS'} "
                     f"p99={float(m.get('p99_ttft_ms') or math.nan):.0f} over={over}/{n}")
    return shown


def slo_rows(found: list[dict]) -> list[Row]:
    truth = true_max_rate()
    step = SEARCH_TOLERANCE * truth
    wrong = [f["max_load_under_slo"] for f in found if abs(f["max_load_under_slo"] - truth) > step + 1e-9]
    answers = sorted(round(f["max_load_under_slo"], 2) for f in found)
    # protocol.search_recheck: misses re-measured, and those that met the SLO when re-measured
    overturned = sorted(r["load"] for f in found for r in f.get("rechecked", []) if not r["confirmed"])
    rechecks = sum(len(f.get("rechecked", [])) for f in found)
    # the search's cost: probes run, of them re-measurements; searches whose note said a load met
    # the SLO only at its last re-measurement allowed
    probes = [len(f.get("probes", [])) for f in found]
    again = sum(p.get("recheck", 0) > 0 for f in found for p in f.get("probes", []))
    late = sum("only at its last re-measurement" in f.get("note", "") for f in found)
    return [Row("SLO search: answer beyond one step of the truth", 0.05, len(found), len(wrong),
                f"truth {truth:.2f} req/s, step {step:.2f}; answers {answers}; {rechecks} misses re-measured, "
                f"{len(overturned)} met the SLO when re-measured {overturned}; probes a search "
                f"{sum(probes) / max(len(found), 1):.1f} ({again / max(len(found), 1):.1f} of them re-measurements); "
                f"{late} said a load met the SLO only at its last re-measurement")]


# ------------------------------------------------------------------------------------ ablation
# two factors, each adding a known TTFT on the fake ($FAKE_ENGINE_ADD_TTFT_MS_<NAME>): the effects
# add in milliseconds, so the interaction of the ratios is known (``true_interaction``).  Large
# enough that the truth lies far from 1 (0.48 on a measured 21 ms) and from what a broken formula
# gives (its inverse 2.1; the singles' sum for their product 0.87): at +4 and +6 ms
# it was 0.97-0.98, which an interval that ignored the data (1, wide) covers as well
ABLATION_ADD_MS = {"a": 40.0, "b": 80.0}
ABLATION_METRIC = "p50_ttft_ms"
# one request at a time in every arm (the slowest, 20 + 120 + 5 ms, within 1/6 s): the client's
# share of a TTFT is then the same in each arm, so the factors add in what the client measures
# too; at 16 req/s and 8 tokens the arms overlapped requests by different amounts, and the
# client's share grew with them (+0.45 ms at +50 ms): a bias of 0.7 % in I, where 2 blocks on a
# quiet host gave an interval of +-0.8 %
ABLATION_LOAD = ["workload.input_tokens=32", "workload.output_tokens=2", "load=constant", "load.num_requests=8",
                 "load.warmup_requests=0", "protocol.load_points=[6]"]


def true_interaction(base_ms: float, add: dict[str, float] = ABLATION_ADD_MS) -> float:
    """I = r_ab / (r_a r_b) of a TTFT of ``base_ms`` to which each factor adds its milliseconds."""
    a, b = add.values()
    return (base_ms + a + b) * base_ms / ((base_ms + a) * (base_ms + b))


def ablation_trial(tmp: Path, seed: int, blocks: int = 3, add: dict[str, float] = ABLATION_ADD_MS) -> dict:
    """One ablation (baseline, a, b, a+b; ``blocks`` blocks, every arm launched fresh in each): the
    interaction's interval on p50 TTFT, and the baseline's measured p50 TTFT (the truth's base:
    the engine's 20 ms and the client's own share).  The quality gate is off: it judges nothing
    this row measures and ran after every session's load, 16 greedy requests one by one (3 s a
    launch on this fake, a third of a trial's time)."""
    from tests.fake_engine_process import ADD_TTFT_ENV
    out, port = tmp / "abl", free_port()
    opts = ", ".join(f'{k}: ["+engine.env.{ADD_TTFT_ENV}{k.upper()}={v:g}"]' for k, v in add.items())
    t0 = time.perf_counter()
    run_experiment(["protocol=ablation", *engine_overrides(port, out, ENGINE), *ABLATION_LOAD, "mlflow.enabled=false",
                    f"protocol.optimisations={{{opts}}}", f"protocol.repeats={blocks}", "quality.enabled=false",
                    f"seed={seed}", f"workload.seed={seed}"])
    seconds = time.perf_counter() - t0
    doc = json.loads((out / results_io.ABLATION).read_text())
    m = doc["points"][0]["metrics"][ABLATION_METRIC]
    arm = next(a for a in m["arms"].values() if "interaction" in a)
    sessions = sessions_of(out)
    base = baseline_median(sessions)
    # the same base from every arm's sessions less what its factors add (4x the sessions, if they add)
    added = {"baseline": 0.0, **{f"+{k}": v for k, v in add.items()}, "all": sum(add.values())}
    pooled = [s[ABLATION_METRIC] - added[s["config"]] for s in sessions if isinstance(s.get(ABLATION_METRIC), float)]
    shutil.rmtree(out)
    return {"interaction": arm["interaction"], "baseline_ms": base, "truth": true_interaction(base, add),
            "pooled_base_ms": sum(pooled) / len(pooled), "confidence": doc.get("confidence"), "blocks": blocks,
            "seconds": round(seconds, 1), "windows": window_figures(sessions)}


def baseline_median(sessions: list[dict]) -> float:
    """The baseline arm's p50 TTFT, the mean over its blocks."""
    vals = [s.get(ABLATION_METRIC) for s in sessions if s["config"] == "baseline"]
    vals = [v for v in vals if isinstance(v, (int, float))]
    return sum(vals) / len(vals) if vals else math.nan


def window_figures(sessions: list[dict]) -> dict:
    """A trial's sessions in short: each arm's p50 TTFT per block, and the windows' medians (s)."""
    import numpy as np
    arms: dict[str, list] = {}
    for s in sessions:
        arms.setdefault(s["config"], []).append(round(s.get(ABLATION_METRIC) or math.nan, 1))
    return {"p50_ttft_ms": arms, **{k: round(float(np.median([s[k] for s in sessions])), 3)
                                    for k in ("window_s", "startup_s", "prepare_s", "load_s", "after_s")}}


def ablation_rows(trials: list[dict]) -> list[Row]:
    missed = [t for t in trials if not t["interaction"]["low"] <= t["truth"] <= t["interaction"]["high"]]
    conf = (trials[0].get("confidence") or 0.95) if trials else 0.95
    shown = [f"{t['interaction']['value']:.3f} [{t['interaction']['low']:.3f}, {t['interaction']['high']:.3f}] "
             f"vs {t['truth']:.4f}" for t in trials]
    # how far the intervals reach: those that exclude 1 found the interaction, not only covered it
    found = sum(not t["interaction"]["low"] <= 1 <= t["interaction"]["high"] for t in trials)
    blocks = sorted({t.get("blocks", 3) for t in trials})
    return [Row("ablation: interaction interval misses the truth", 1 - conf, len(trials), len(missed),
                f"p50 TTFT, factors +{ABLATION_ADD_MS['a']:g} and +{ABLATION_ADD_MS['b']:g} ms, blocks {blocks}; "
                f"{found} of {len(trials)} intervals exclude 1; {'; '.join(shown)}")]


# ------------------------------------------------------------------------------------ main
def measure(row: str, case: str = "identical", trials: int = 20, seed: int = 0, repeats: int | None = None,
            budget_s: float | None = None, log=lambda *a, **k: None, adjust: str | None = None,
            recheck: int | None = None) -> list[Row]:
    """``trials`` live trials of one row's case (fewer where ``budget_s`` runs out first: no
    trial starts after it): its lines of the table."""
    # python -m tests.fake_engine_process, from any folder
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    t0 = time.perf_counter()
    results: list = []
    with tempfile.TemporaryDirectory(prefix="verdicts-") as d:
        tmp = Path(d)
        template = mlflow_template(tmp) if row == "gate" else None
        for i in range(trials):
            if budget_s is not None and time.perf_counter() - t0 > budget_s:
                log(f"  the budget of {budget_s:g} s is spent: {i} trials", flush=True)
                break
            s = seed * 100_000 + i
            if row == "compare":
                told = ((f"protocol.adjust={adjust}",) if adjust else ()) + (
                    (f"protocol.repeats={repeats}",) if repeats else ())
                results.append(compare_trial(tmp, case, s, told))
            elif row == "gate":
                results.append(gate_trial(tmp, template, case, s, repeats or 3))
            elif row == "ablation":
                results.append(ablation_trial(tmp, s, repeats or 3))
            else:
                told = (f"protocol.search_recheck={recheck}",) if recheck is not None else ()
                results.append(slo_trial(tmp, s, told))
            shown = results[-1] if row != "slo_search" else {k: results[-1].get(k) for k in (
                "max_load_under_slo", "bracket", "probe_figures", "note")}
            log(f"  trial {i + 1}/{trials} ({time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f}): "
                f"{shown}", flush=True)
    if row == "compare":
        return compare_rows(results, case)
    if row == "ablation":
        return ablation_rows(results)
    return gate_rows(results, case) if row == "gate" else slo_rows(results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--row", choices=("compare", "gate", "slo_search", "ablation"), required=True)
    ap.add_argument("--case", default="identical",
                    help="compare: identical|ttft5|ttft10; gate: identical|ttft10|errors5 (slo_search: ignored)")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=None,
                    help="gate: repeats of each build's load point (default 3); compare: protocol.repeats, its blocks "
                         "(default: the protocol's own, 3); ablation: its blocks (default 3)")
    ap.add_argument("--adjust", choices=("bonferroni", "none"), default=None,
                    help="compare: protocol.adjust (default: the protocol's own)")
    ap.add_argument("--recheck", type=int, default=None,
                    help="slo_search: protocol.search_recheck (default: the protocol's own)")
    ap.add_argument("--budget-s", type=float, default=None, help="start no trial after this many seconds")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    a = ap.parse_args(argv)
    cases = {"compare": COMPARE_CASES, "gate": GATE_CASES, "slo_search": {"identical": None},
             "ablation": {"identical": None}}[a.row]
    if a.row in ("slo_search", "ablation"):
        a.case = "identical"
    if a.case not in cases:
        ap.error(f"--case: one of {', '.join(cases)} for --row {a.row}")
    load = os.getloadavg()
    t0 = time.perf_counter()
    table = measure(a.row, a.case, a.trials, a.seed, a.repeats, a.budget_s, log=print, adjust=a.adjust,
                    recheck=a.recheck)
    took = time.perf_counter() - t0
    print(f"\n{a.row} --case {a.case}: seed {a.seed}, {took:.0f} s; "
          f"load average at start {load[0]:.1f} on {os.cpu_count()} CPUs")
    print(HEADER)
    for r in table:
        print(r.line())
    if a.json:
        a.json.write_text(json.dumps([{**r.__dict__, **dict(zip(("rate", "low", "high", "holds"), r.judged()))}
                                      for r in table], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
