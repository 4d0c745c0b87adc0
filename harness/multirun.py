"""Hydra multirun (``-m``): which overrides a command line sweeps, and each job's folder."""

from __future__ import annotations

from harness import results_io


def swept_keys(argv: list[str]) -> frozenset[str]:
    """Override keys that a multirun sweeps: a top-level comma in the value, or a sweep function."""
    keys = set()
    for a in argv:
        if "=" not in a or a.startswith("-"):
            continue
        key, val = a.split("=", 1)
        depth = 0
        for ch in val:
            depth += ch in "[{(" and 1 or (-1 if ch in "]})" else 0)
            if ch == "," and depth == 0:
                keys.add(key.lstrip("+~"))
                break
        if val.startswith(("range(", "choice(", "glob(", "interval(")):
            keys.add(key.lstrip("+~"))
    return frozenset(keys)


def job_subdir(swept: frozenset[str]) -> str:
    """Under ``-m``, each job writes its own folder below output_dir, named after its swept values."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except (ImportError, ValueError):
        return ""
    if hc.mode != RunMode.MULTIRUN:
        return ""
    parts = [o for o in hc.overrides.task if o.split("=", 1)[0].lstrip("+~") in swept]
    name = ",".join(parts) or "default"
    return f"job{hc.job.num}-" + "".join(c if c.isalnum() or c in "._=,-" else "_" for c in name)[:120]


# ---------------------------------------------------------------------- jobs wherever they ran
JOB_FILE = "job.json"
GATHER_FILE = "multirun.json"


def _hydra():
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except (ImportError, ValueError):
        return None
    return hc if hc.mode == RunMode.MULTIRUN else None


def enter_launch_dir() -> None:
    """A job that a launcher runs elsewhere (a Ray worker, a SLURM node) starts in the folder
    the command was typed in, where that folder exists (a shared filesystem): relative paths
    (``results/``, ``sqlite:///results/mlflow.db``, a workload file) then mean what they meant
    to the user."""
    hc = _hydra()
    if hc is None:
        return
    import os

    cwd = hc.runtime.cwd
    if cwd and os.path.isdir(cwd) and os.path.realpath(os.getcwd()) != os.path.realpath(cwd):
        os.chdir(cwd)


def sweep_root(experiment: str, output_dir: str | None, sweep_dir: str) -> str:
    """The folder every job of a multirun writes below (each in ``job_subdir``): ``output_dir``,
    or one named after Hydra's sweep folder, the same for every job however they are launched
    (Hydra resolves ``hydra.sweep.dir`` once, in the launching process)."""
    import os

    return output_dir or os.path.join("results", experiment, "multirun-" + os.path.basename(sweep_dir.rstrip("/")))


def default_output_dir(cfg) -> str | None:
    """Under ``-m`` without ``output_dir``: ``sweep_root``; otherwise None (a run of its own)."""
    hc = _hydra()
    if hc is None or cfg.output_dir:
        return None
    return sweep_root(str(cfg.experiment), None, str(hc.sweep.dir))


def write_job(out, status: str) -> None:
    """``job.json`` in a job's folder: where it ran, so the gathering step can say so."""
    import os
    import socket
    import sys
    import time


    hc = _hydra()
    if hc is None:
        return
    choice = dict(hc.runtime.choices).get("hydra/launcher", "basic")
    node = None
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():  # a Ray launcher's task: which node
        node = sys.modules["ray"].get_runtime_context().get_node_id()
    results_io.write_json(os.path.join(str(out), JOB_FILE), {
        "job": int(hc.job.num), "job_id": str(hc.job.id), "launcher": choice, "host": socket.gethostname(),
        "pid": os.getpid(), "overrides": list(hc.overrides.task), "status": status,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "folder": str(out), "ray_node": node})


def gather(root) -> dict:
    """After every job of a multirun: ``multirun.json`` (each job: folder, host, launcher,
    status), ``runs.parquet`` (every run of every job) and the report, at the sweep's root.
    A job folder without ``job.json`` is reported as failed or not on a shared filesystem."""
    from pathlib import Path

    from harness import experiment_record

    root = Path(root)
    jobs = []
    for d in sorted((p for p in root.iterdir() if p.is_dir() and p.name.startswith("job")),
                    key=lambda p: int("".join(c for c in p.name[3:].split("-", 1)[0] if c.isdigit()) or 0)):
        rec = results_io.read_json(d / JOB_FILE) if (d / JOB_FILE).exists() else {
            "status": "unknown: no job.json (the job failed, or ran where this folder is not shared)"}
        rec.update(folder=d.name, runs=len(results_io.find_run_dirs(d)))
        jobs.append(rec)
    rows = experiment_record.run_rows(root)
    if rows:
        experiment_record.write_runs_table(root, rows)
    out = {"root": str(root), "jobs": jobs, "runs": len(rows),
           "hosts": sorted({j.get("host") for j in jobs if j.get("host")}),
           "launchers": sorted({j.get("launcher") for j in jobs if j.get("launcher")}),
           "complete": all(j.get("status") == "complete" for j in jobs)}
    results_io.write_json(root / GATHER_FILE, out)
    return out


try:
    from hydra.experimental.callback import Callback
except ImportError:  # (hydra-core is a dependency; this keeps the module importable without it)
    Callback = object


class GatherJobs(Callback):
    """Hydra callback (``hydra.callbacks.gather_jobs`` in conf/config.yaml): when a multirun
    ends, in the launching process, gather its jobs' folders (``gather``) and build the report
    over all of them."""

    def on_multirun_end(self, config, **kwargs) -> None:
        import os

        root = sweep_root(str(config.experiment), config.output_dir, str(config.hydra.sweep.dir))
        if not os.path.isdir(root):
            print(f"multirun: no job wrote to {root} (jobs on hosts whose disks are not shared: "
                  "their runs are in the tracking server)", flush=True)
            return
        g = gather(root)
        print(f"multirun: {len(g['jobs'])} jobs, {g['runs']} runs gathered in {root} "
              f"(hosts: {', '.join(g['hosts']) or '-'}; launcher: {', '.join(g['launchers']) or '-'})", flush=True)
        if g["runs"] and config.report.enabled:
            from harness.report.build import render

            try:
                print(f"report: {render(root, static_figures=config.report.get('static'))}", flush=True)
            except ValueError as e:
                print(f"report: {e}", flush=True)
