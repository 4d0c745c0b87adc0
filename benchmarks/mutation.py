"""Mutation testing (cosmic-ray) of the modules every verdict and bill goes through, each against
the unit tests that cover it: prints, per module, the mutants, killed, survived, incompetent and
skipped, and the diff of every survivor.

    python benchmarks/mutation.py metrics/cost.py metrics/slo.py        # the ones named
    python benchmarks/mutation.py                                       # every module below (hours)
    python benchmarks/mutation.py --operators all metrics/slo.py        # every cosmic-ray operator
    python benchmarks/mutation.py metrics/cost.py --keep before/        # keep the sessions, then after
    python benchmarks/mutation.py metrics/cost.py --recheck before/     # new tests: re-run the survivors only
    python benchmarks/mutation.py metrics/comparison.py --shard 0/2 --keep before/ &   # two processes,
    python benchmarks/mutation.py metrics/comparison.py --shard 1/2 --keep before/     # half the mutants each

A survivor is a change to the code that no test notices; one that changes a printed number is a
missing test.  ``--operators sample`` (default) keeps one replacement per binary operator
(* -> /, / -> *, + -> -, - -> +) and every comparison, number, boolean, unary, loop and exception
mutation; the other binary replacements (bit operations, shifts, powers, modulo on floats) mostly
raise at once, and ``|`` in this code base is in type annotations (strings under ``from __future__
import annotations``): equivalent mutants.  Each module runs in a copy of the repository (the
tracked and untracked, not ignored files) so an interrupted run never leaves a mutant behind.
Needs ``pip install cosmic-ray`` (not a harness dependency)."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# module -> the unit tests that cover it (fast first: -x stops at the first failure); tests that
# only move numbers elsewhere (MLflow plumbing, browsers) are left out: they cost seconds per mutant
MODULES = {
    "metrics/cost.py": ["tests/metrics/test_cost_exact.py", "tests/metrics/test_recompute_summary.py",
                        "tests/metrics/test_cost.py",
                        "tests/metrics/test_summary_cost.py", "tests/protocols/plan/test_recompute_plan.py",
                        "-k", "not mlflow"],
    "metrics/slo.py": ["tests/metrics/test_recompute_summary.py", "tests/metrics/test_slo.py",
                       "tests/metrics/test_metrics.py", "tests/metrics/test_summary_cost.py", "-k", "not mlflow"],
    # metrics/statistics/ is a package: each of its modules mutated against the same tests
    **{f"metrics/statistics/{m}.py": ["tests/metrics/test_statistics.py", "tests/metrics/test_comparison_ratios.py",
                                      "tests/metrics/test_recompute_comparison.py"]
       for m in ("estimate", "bootstrap", "pooled_percentiles", "differences", "ratios", "verdicts", "aggregate")},
    "metrics/summary.py": ["tests/metrics/test_summary_load.py", "tests/metrics/test_summary_adapters.py",
                           "tests/metrics/test_summary_sessions.py", "tests/metrics/test_reasoning_metrics.py",
                           "tests/metrics/test_recompute_summary.py", "tests/metrics/test_metrics.py",
                           "tests/metrics/test_summary_cost.py", "-k", "not mlflow"],
    "metrics/comparison.py": ["tests/metrics/test_comparison.py", "tests/metrics/test_comparison_ratios.py",
                              "tests/metrics/test_recompute_comparison.py",
                              "tests/protocols/test_compare_replicates.py"],
    "metrics/tasks.py": ["tests/metrics/test_tasks.py"],
    "metrics/fleet.py": ["tests/metrics/test_fleet.py", "tests/protocols/plan/test_fleet.py",
                         "tests/protocols/plan/test_recompute_plan.py"],
}
SAMPLE_EXCLUDE = [
    r"core/ReplaceBinaryOperator_Mul_(?!Div$)",
    r"core/ReplaceBinaryOperator_Div_(?!Mul$)",
    r"core/ReplaceBinaryOperator_Add_(?!Sub$)",
    r"core/ReplaceBinaryOperator_Sub_(?!Add$)",
    r"core/ReplaceBinaryOperator_(BitOr|BitAnd|BitXor|LShift|RShift|Pow|Mod|FloorDiv)_",
]


def tool(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        sys.exit(f"{name} not found beside {sys.executable}: pip install cosmic-ray")
    return str(path)


def copy_repo(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = REPO / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


def config(module: str, tests: list[str], timeout: float, operators: str) -> str:
    cmd = [sys.executable, "-m", "pytest", "-n", "0", "-x", "-q", "-p", "no:cacheprovider", "-W", "ignore",
           "--hypothesis-profile=mutation", *tests]
    exclude = SAMPLE_EXCLUDE if operators == "sample" else []
    quoted = " ".join(json.dumps(c) if " " in c else c for c in cmd)
    return "\n".join([
        "[cosmic-ray]", f'module-path = "{module}"', f"timeout = {timeout}", "excluded-modules = []",
        f"test-command = {json.dumps(quoted)}", "", "[cosmic-ray.distributor]", 'name = "local"', "",
        "[cosmic-ray.filters.operators-filter]", f"exclude-operators = {json.dumps(exclude)}", ""])


def session_name(module: str, shard: tuple[int, int] | None = None) -> str:
    return module.replace("/", "_") + (f".shard{shard[0]}of{shard[1]}" if shard else "") + ".sqlite"


def survivors_of(session: Path) -> set[tuple[str, int, tuple]]:
    """(operator, occurrence, start) of every mutant that survived in an earlier session (``session``
    and its shards' sessions beside it)."""
    sessions = [session, *session.parent.glob(session.name.removesuffix(".sqlite") + ".shard*.sqlite")]
    lines = []
    for s in filter(Path.exists, sessions):
        out = subprocess.run([tool("cosmic-ray"), "dump", str(s)], check=True, capture_output=True)
        lines += out.stdout.decode().splitlines()
    if not lines:
        sys.exit(f"--recheck: no session {session} (nor shards of it)")
    found = set()
    for line in lines:
        job, result = json.loads(line)
        if result and result["test_outcome"] == "survived":
            m = job["mutations"][0]
            found.add((m["operator_name"], m["occurrence"], tuple(m["start_pos"])))
    return found


def skip_all_but(session: Path, keep: set) -> None:
    """Mark every pending mutant not in ``keep`` skipped (what cosmic-ray's own filters do)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            m = item.mutations[0]
            if (m.operator_name, m.occurrence, tuple(m.start_pos)) not in keep:
                db.set_result(item.job_id, WorkResult(output="killed in the earlier session",
                                                      worker_outcome=WorkerOutcome.SKIPPED))


def skip_other_shards(session: Path, shard: tuple[int, int]) -> None:
    """Mark every pending mutant not in shard ``k`` of ``n`` skipped: the n shards, run as n
    processes, split the mutants between them (by their place in the module: each process has a
    session of its own, whose job ids are random)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    k, n = shard
    with use_db(str(session), WorkDB.Mode.open) as db:
        items = sorted(db.pending_work_items, key=lambda i: (tuple(i.mutations[0].start_pos),
                                                             i.mutations[0].operator_name, i.mutations[0].occurrence))
        for i, item in enumerate(items):
            if i % n != k:
                db.set_result(item.job_id, WorkResult(output=f"another shard of {n}",
                                                      worker_outcome=WorkerOutcome.SKIPPED))


# What every test run of the MODULES imports before it reaches the repository's own code: the fork
# runner imports them once, in the process its test runs are forked from.
PRELOAD = ("numpy", "scipy.stats", "pandas", "pyarrow", "pyarrow.parquet", "hypothesis", "hypothesis.extra.numpy",
           "pytest", "omegaconf", "yaml")


class MutantFinder:
    """Imports ``name`` from ``source`` (the mutant) instead of its file: a forked test run sees the
    mutant while the file on disk, and every other test run forked beside it, keeps the original."""

    def __init__(self, name: str, path: Path, source: str):
        self.name, self.path, self.source = name, path, source

    def find_spec(self, fullname, path=None, target=None):
        import importlib.util

        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path, loader=self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(self.source, str(self.path), "exec"), module.__dict__)  # noqa: S102 - the mutant itself


def exec_forked(work: Path, module: str, tests: list[str], timeout: float, jobs: int) -> None:
    """Run every pending mutant of ``work/session.sqlite`` as cosmic-ray's ``exec`` does (exit status 0:
    survived; any other, or past ``timeout``: killed), but each test run is a fork of this process with
    PRELOAD imported, ``jobs`` at a time, instead of a new interpreter that imports them again (on 23
    statistics.py mutants, one job: 70 s against cosmic-ray exec's 125 s, the same outcomes).  The
    mutant is put in the forked run's imports (MutantFinder), never on disk.  Only the test process
    sees it: none of the MODULES tests starts a Python process of its own (``--runner cosmic-ray``
    runs every mutant through the file on disk)."""
    import importlib
    import signal

    from cosmic_ray.mutating import MutationVisitor
    from cosmic_ray.plugins import get_operator
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    for name in PRELOAD:
        importlib.import_module(name)
    target = work / module
    original = target.read_text(encoding="utf-8")
    name = module.removesuffix(".py").replace("/", ".")
    argv = ["-n", "0", "-x", "-q", "-p", "no:cacheprovider", "-W", "ignore", "--hypothesis-profile=mutation", *tests]
    with use_db(str(work / "session.sqlite"), WorkDB.Mode.open) as db:
        pending = list(db.pending_work_items)
        running: dict[int, tuple] = {}

        def start(item) -> None:
            m = item.mutations[0]
            operator = get_operator(m.operator_name)(**(getattr(m, "operator_args", None) or {}))
            mutant = MutationVisitor.mutate_code(original, operator, m.occurrence)
            if mutant is None:
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.NO_TEST))
                return
            out = tempfile.TemporaryFile()
            sys.stdout.flush(), sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the test run
                code = 1
                try:
                    os.setpgid(0, 0)
                    os.dup2(out.fileno(), 1), os.dup2(out.fileno(), 2)
                    os.chdir(work)
                    sys.path.insert(0, str(work))
                    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
                    sys.meta_path.insert(0, MutantFinder(name, target, mutant))
                    import pytest

                    code = int(pytest.main(argv))
                finally:
                    os._exit(code)
            running[pid] = (item, mutant, out, time.monotonic())

        def finish(pid: int, status: int | None) -> None:
            item, mutant, out, _ = running.pop(pid)
            out.seek(0)
            text = out.read()[-20000:].decode(errors="replace")
            out.close()
            survived = status is not None and os.waitstatus_to_exitcode(status) == 0
            db.set_result(item.job_id, WorkResult(
                output=text if status is not None else "timeout", worker_outcome=WorkerOutcome.NORMAL,
                test_outcome=TestOutcome.SURVIVED if survived else TestOutcome.KILLED,
                diff="\n".join(["--- mutation diff ---", *difflib.unified_diff(
                    original.split("\n"), mutant.split("\n"), f"a/{module}", f"b/{module}", lineterm="")])))

        while pending or running:
            while pending and len(running) < jobs:
                start(pending.pop())
            pid, status = os.waitpid(-1, os.WNOHANG) if running else (0, 0)
            if pid:
                finish(pid, status)
                continue
            now = time.monotonic()
            for pid, (_, _, _, t0) in list(running.items()):
                if now - t0 > timeout:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    os.waitpid(pid, 0)
                    finish(pid, None)
            time.sleep(0.02)


def run_module(module: str, timeout: float, operators: str, keep: Path | None, recheck: Path | None = None,
               shard: tuple[int, int] | None = None, runner: str = "fork", jobs: int = 1) -> dict:
    work = Path(tempfile.mkdtemp(prefix="mutation-"))
    try:
        copy_repo(work)
        (work / "cr.toml").write_text(config(module, MODULES[module], timeout, operators))
        env = {**os.environ, "PYTHONPATH": str(work)}
        run = lambda *a: subprocess.run([*a], cwd=work, env=env, check=True, capture_output=True)  # noqa: E731
        run(tool("cosmic-ray"), "init", "cr.toml", "session.sqlite")
        run(tool("cr-filter-operators"), "session.sqlite", "cr.toml")
        # the shard first, over every mutant as in the run being rechecked: sharding the survivors
        # left by --recheck would keep only every n-th of them
        if shard is not None:
            skip_other_shards(work / "session.sqlite", shard)
        if recheck is not None:
            skip_all_but(work / "session.sqlite", survivors_of(recheck / session_name(module)))
        t0 = time.monotonic()
        if runner == "fork":
            exec_forked(work, module, MODULES[module], timeout, jobs)
        else:
            run(tool("cosmic-ray"), "exec", "cr.toml", "session.sqlite")
        elapsed = time.monotonic() - t0
        dump = run(tool("cosmic-ray"), "dump", "session.sqlite").stdout.decode().splitlines()
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy2(work / "session.sqlite", keep / session_name(module, shard))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    counts, survivors = Counter(), []
    for line in dump:
        job, result = json.loads(line)
        if result is None:
            counts["not run"] += 1
        elif result["worker_outcome"] == "skipped":
            counts["skipped"] += 1
        else:
            counts[result["test_outcome"] or result["worker_outcome"]] += 1
            if result["test_outcome"] == "survived":
                m = job["mutations"][0]
                survivors.append((m["operator_name"], m["start_pos"][0], result["diff"]))
    return {"module": module, "seconds": elapsed, "counts": counts, "survivors": survivors}


def parse_shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard: K/N with whole numbers, not {text!r}") from None
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"--shard: K must be 0..N-1, not {text!r}")
    return k, n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", default=list(MODULES), help="modules to mutate (default: all)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant's test run")
    ap.add_argument("--operators", choices=("sample", "all"), default="sample")
    ap.add_argument("--keep", type=Path, help="folder to keep each session's sqlite in (cr-report, cr-html)")
    ap.add_argument("--recheck", type=Path, help="a --keep folder of an earlier run: re-run only the mutants that "
                    "survived there (the others count as skipped)")
    ap.add_argument("--shard", type=parse_shard, metavar="K/N", help="run only the K-th of N shares of the "
                    "mutants (K from 0): N processes with K = 0..N-1 use N cores; the others count as skipped")
    ap.add_argument("--runner", choices=("fork", "cosmic-ray"), default="fork", help="fork: each test run a fork "
                    "of one process that imported the test's libraries once, the mutant in its imports (fast); "
                    "cosmic-ray: cosmic-ray exec, a new interpreter a mutant, the mutant written to the file")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="test runs at once (--runner fork)")
    ap.add_argument("--quiet", action="store_true", help="no survivor diffs")
    args = ap.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        ap.error(f"not a module this script knows: {', '.join(unknown)} (known: {', '.join(MODULES)})")
    rows = []
    for module in args.modules:
        r = run_module(module, args.timeout, args.operators, args.keep, args.recheck, args.shard, args.runner,
                       args.jobs)
        rows.append(r)
        if not args.quiet:
            for op, line, diff in r["survivors"]:
                print(f"--- survived: {module}:{line} {op}\n{diff}")
    print(f"\n{'module':<24} {'mutants':>7} {'killed':>7} {'survived':>8} {'incompetent':>11} {'skipped':>7} "
          f"{'seconds':>8}")
    for r in rows:
        c = r["counts"]
        run = c["killed"] + c["survived"] + c["incompetent"]
        print(f"{r['module']:<24} {run:>7} {c['killed']:>7} {c['survived']:>8} {c['incompetent']:>11} "
              f"{c['skipped']:>7} {r['seconds']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
