"""``tokenfactory import FILE OUT_DIR``: another tool's result file as our run folder(s)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    """``tokenfactory import FILE OUT_DIR [--slo-ttft-ms MS] [--slo-tpot-ms MS] [--slo-e2el-ms MS]``."""
    ap = argparse.ArgumentParser(
        prog="tokenfactory import",
        description="convert another tool's result file (vllm bench serve --save-result [--save-detailed], "
                    "GuideLLM benchmarks.json, AIPerf profile_export.jsonl / profile_export_aiperf.json) into our "
                    "run folder format, for tokenfactory report --import")
    ap.add_argument("file")
    ap.add_argument("out_dir")
    ap.add_argument("--slo-ttft-ms", type=float, help="goodput and slo_ok as in our runs: TTFT limit (ms)")
    ap.add_argument("--slo-tpot-ms", type=float, help="TPOT limit (ms)")
    ap.add_argument("--slo-e2el-ms", type=float, help="end-to-end latency limit (ms)")
    ap.add_argument("--slo-percentile", type=float, default=99.0, help="percentile the SLO checks are made at")
    ap.add_argument("--source-version", help="the tool's version, where the file does not record it")
    a = ap.parse_args(argv)
    from harness.imports import import_result
    from metrics.slo import SLO

    for flag, v in (("--slo-ttft-ms", a.slo_ttft_ms), ("--slo-tpot-ms", a.slo_tpot_ms),
                    ("--slo-e2el-ms", a.slo_e2el_ms)):
        if v is not None and not v > 0:
            print(f"error: {flag} {v}: must be > 0 (ms)", file=sys.stderr)
            return 2
    if not 0 < a.slo_percentile < 100:
        print(f"error: --slo-percentile {a.slo_percentile}: must be between 0 and 100", file=sys.stderr)
        return 2
    slo = SLO(a.slo_ttft_ms, a.slo_tpot_ms, a.slo_e2el_ms, a.slo_percentile)
    try:
        out = import_result(a.file, a.out_dir, slo, source_version=a.source_version)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from harness.results_io import SUMMARY, find_run_dirs, read_json

    for d in find_run_dirs(out):
        s = read_json(d / SUMMARY)
        print(f"{d}: {s.get('source_tool')} · {s.get('num_requests')} requests, {s.get('completed')} completed, "
              f"{len(s.get('definition_notes') or [])} definition note(s) in {SUMMARY}")
    print(f"show it beside an experiment: tokenfactory report EXPERIMENT_DIR --import {out}")
    return 0
