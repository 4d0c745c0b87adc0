"""Where a verdict trial's time goes: one ablation trial of ``benchmarks/verdicts.py``, each engine
session taken apart by the harness's own steps.

    python benchmarks/trial_phases.py [--blocks 3] [--quality] [--child-imports scipy.stats]
        (docs/measured/verdicts.md, the ablation row)

Per session (one engine launch): the telemetry process's start (spawned, until it answers), the
harness's set-up before the engine starts (``build_ahead``: the tokenizer, the prompt builder, the
points' requests), the engine's start to ready, the load point (its window's load and the
harness's work around it), the quality gate's greedy requests, and the stop; the trial's rest
(composing the configs, the records) beside them.  ``--quality`` runs the quality gate as the
protocol's default does (``benchmarks/verdicts.py`` turns it off); ``--child-imports`` has every
telemetry process import those modules first, as it did while ``benchmarks/verdicts.py`` imported
scipy.stats at its top (a spawned child runs its parent's main script's top again).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

CHILD_IMPORTS = "TOKENFACTORY_TRIAL_PHASES_IMPORTS"
# the telemetry child runs this top again (multiprocessing's spawn): what --child-imports named
for _name in filter(None, os.environ.get(CHILD_IMPORTS, "").split(",")):
    importlib.import_module(_name)

REPO = Path(__file__).resolve().parents[1]
PHASES = ("telemetry start", "set-up", "engine start", "load point", "quality gate", "stop")


def timed(owner, attr: str, phase: str, seconds: dict) -> None:
    """Wrap ``owner.attr`` so that each call's wall time is added to ``seconds[phase]``."""
    f = getattr(owner, attr)

    @functools.wraps(f)
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            seconds[phase].append(time.perf_counter() - t)
    setattr(owner, attr, wrapper)


def forkserver(process) -> None:
    """``metrics.telemetry.process`` with its children forked from one server process that imported
    their modules once, not each spawned afresh (a clean, single-threaded parent all the same)."""
    import multiprocessing as mp
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["metrics.telemetry.process", "pandas", "pyarrow.parquet"])

    class Contexts:
        @staticmethod
        def get_context(method=None):
            return ctx
    process.mp = Contexts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quality", action="store_true", help="run the quality gate (the protocol's default)")
    ap.add_argument("--forkserver", action="store_true",
                    help="start the telemetry processes from one forkserver that imported their modules once "
                         "(what metrics/telemetry/process.py could do instead of spawning each)")
    ap.add_argument("--child-imports", default="", help="modules every telemetry process imports first (a,b)")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    os.environ[CHILD_IMPORTS] = a.child_imports
    import benchmarks.verdicts as v
    from harness import engine_session, quality_gate
    from metrics.telemetry import process
    from protocols import experiment

    if a.forkserver:
        forkserver(process)
    s: dict[str, list[float]] = defaultdict(list)
    timed(process.TelemetryProcess, "__init__", "telemetry start", s)
    timed(engine_session.EngineSession, "build_ahead", "set-up", s)
    timed(engine_session.EngineSession, "start", "session start", s)
    timed(engine_session.EngineSession, "run_point", "load point", s)
    timed(quality_gate, "collect", "quality gate", s)
    timed(engine_session.EngineSession, "stop", "stop", s)
    timed(experiment.Experiment, "run_session", "session", s)
    # the imports a trial's first session pays once per process (transformers' tokenizer ...), before it
    from loadgen.workloads.prompts import load_tokenizer
    load_tokenizer(v.tokenizer(), local_only=True)
    extra = () if a.quality else ("quality.enabled=false",)
    load = os.getloadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trial-phases-") as d:
        out = Path(d) / "abl"
        from tests.fake_engine_process import ADD_TTFT_ENV
        opts = ", ".join(f'{k}: ["+engine.env.{ADD_TTFT_ENV}{k.upper()}={x:g}"]' for k, x in v.ABLATION_ADD_MS.items())
        v.run_experiment(["protocol=ablation", *v.engine_overrides(v.free_port(), out, v.ENGINE), *v.ABLATION_LOAD,
                          "mlflow.enabled=false", f"protocol.optimisations={{{opts}}}", f"protocol.repeats={a.blocks}",
                          f"seed={a.seed}", f"workload.seed={a.seed}", *extra])
        total = time.perf_counter() - t0
        windows = v.window_figures(v.sessions_of(out))
    n = len(s["session"])
    s["engine start"] = [st - t - b for st, t, b in zip(s.pop("session start"), s["telemetry start"], s["set-up"])]
    print(f"one ablation trial, {a.blocks} blocks, {n} sessions, quality gate {'on' if a.quality else 'off'}, "
          f"telemetry child imports: {a.child_imports or 'none'}"
          f"{', forkserver' if a.forkserver else ''}: {total:.1f} s; load average "
          f"{load[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end, on {os.cpu_count()} CPUs")
    print(f"{'phase':<16} {'s a session (median)':>20} {'min':>6} {'max':>6} {'s a trial':>10}")
    for phase in PHASES:
        x = s.get(phase) or [0.0]
        print(f"{phase:<16} {statistics.median(x):>20.2f} {min(x):>6.2f} {max(x):>6.2f} {sum(x):>10.1f}")
    rest = total - sum(s["session"])
    print(f"{'between sessions':<16} {'':>20} {'':>6} {'':>6} {rest:>10.1f}  (configs, records, analysis)")
    print(f"windows (medians, s): {windows}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
