"""Fixtures shared by the whole suite, each expensive thing built once per test session."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

# Bytecode is cached for the test run even where the host sets PYTHONDONTWRITEBYTECODE=1 (this
# project's hosts and CI do): without it every xdist worker re-compiled the product and rewrote
# the test modules on every run, and every process a test starts (fake engines, `tokenfactory`
# runs) compiled the product modules it imports again. Collecting the default run took 13.8 s
# CPU a worker without .pyc files and 6.0 s with them (`pytest --collect-only -n 0`, load 8).
# Python checks each .pyc against its source's mtime and size; __pycache__/ is in .gitignore.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Static figure export (kaleido driving Chromium) costs 10-40 s a report on a busy 2-core host,
# and every harness run renders a report.  It is tested where it is the subject
# (test_report.py's paper-size test, which clears this); every other report, in this process and
# in the `tokenfactory` processes the tests start, says "static figures not exported" instead.
NO_BROWSER = "/nonexistent/chromium-for-static-figures"
os.environ.setdefault("BROWSER_PATH", NO_BROWSER)

# benchmarks/mutation.py runs the property tests once per mutant (--hypothesis-profile=mutation):
# a failure found is enough there, shrinking it to the smallest example costs minutes a mutant.
from hypothesis import Phase, settings  # noqa: E402

settings.register_profile("mutation", phases=[Phase.explicit, Phase.reuse, Phase.generate])


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker more than the cores this process may use.  The default run waits on
    the processes and sockets its tests start about a third of its time (136 s of CPU over 93 s on
    2 cores with two workers), so a third worker fills the gaps: 81.5 s against 93.1 with two and
    87.6 with four, back to back on this project's 2-core VM at load 2-3.5 (docs/measured/test-times.md)."""
    return len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) + 1


@pytest.fixture(scope="session")
def tiny_model() -> str:
    """The embedded tiny model's folder (model and tokenizer), built once per cache."""
    from engines.tiny_model import ensure_tiny_model

    return str(ensure_tiny_model())


@pytest.fixture(scope="session")
def _mlflow_template(tmp_path_factory):
    """An empty MLflow SQLite store with its tables created, built once per MLflow version in
    tokenfactory's cache: creating the tables (MLflow's migrations) took 2 s CPU in each xdist
    worker of every run, 13 s of wall time under load."""
    from importlib.metadata import version

    from engines.tiny_model import cache_root

    db = cache_root() / "mlflow-template" / f"mlflow-{version('mlflow')}.db"
    if not db.exists():
        from mlflow.tracking import MlflowClient

        fresh = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
        MlflowClient(f"sqlite:///{fresh}").search_experiments()
        db.parent.mkdir(parents=True, exist_ok=True)
        staged = db.with_name(f"{db.name}.{os.getpid()}")
        shutil.copy(fresh, staged)
        os.replace(staged, db)  # whole or absent: another worker may be reading it
    return db


@pytest.fixture
def mlflow_uri(_mlflow_template, tmp_path) -> str:
    """A fresh, empty MLflow store of this test's own: ``sqlite:///<tmp_path>/mlflow.db``."""
    db = tmp_path / "mlflow.db"
    shutil.copy(_mlflow_template, db)
    return f"sqlite:///{db}"
