"""``tokenfactory mlflow-sync PATH [--tracking-uri URI]``: log a finished results folder to MLflow
afterwards (``harness.mlflow_sync.sync``; what goes in is described there)."""

from __future__ import annotations

import argparse
import sys

from harness import mlflow_sync


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="tokenfactory mlflow-sync", description=mlflow_sync.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="a run, sweep or experiment folder")
    ap.add_argument("--tracking-uri", default=None)
    a = ap.parse_args(argv)
    try:
        parent, logged, skipped = mlflow_sync.sync(a.path, a.tracking_uri)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - MLflow still unreachable: say so, nothing is lost
        print(f"error: MLflow: {type(e).__name__}: {str(e)[:500]}; nothing changed in {a.path}", file=sys.stderr)
        return 1
    print(f"logged {logged} run(s) under parent run {parent}" + (f"; {skipped} already there" if skipped else ""))
    return 0
