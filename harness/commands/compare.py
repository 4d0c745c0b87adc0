"""``tokenfactory compare EXP_A EXP_B ... [--allow KEY,...] [--allow-emulated] [--out FILE]``: equal-SLO comparison of
finished experiments (unpaired), written to comparison.json (the current folder unless ``--out``);
the comparison itself is the compare protocol's ``of_finished`` (``protocols.registry``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import results_io
from metrics.comparison import FIXED_KEYS, format_comparison


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="tokenfactory compare",
                                 description="equal-SLO comparison of finished experiments (unpaired)")
    ap.add_argument("experiments", nargs="+",
                    help="results folders (an experiment's output_dir) or MLflow experiment names")
    ap.add_argument("--tracking-uri", help="MLflow store of the named experiments (default: $MLFLOW_TRACKING_URI, "
                                           "else sqlite:///results/mlflow.db)")
    ap.add_argument("--allow", default="", help="fixed conditions allowed to differ (comma-separated: "
                                                + ", ".join(FIXED_KEYS) + ")")
    ap.add_argument("--allow-emulated", action="store_true",
                    help="compare an emulated experiment (engine=dynamo with mocker workers) with a measured one "
                         "(refused without it)")
    ap.add_argument("--metric", action="append", help="a metric to compare (repeatable; default: the usual set)")
    ap.add_argument("--margin", type=float, default=0.02, help="smallest relative difference that counts")
    ap.add_argument("--adjust", choices=("bonferroni", "none"), default="bonferroni",
                    help="bonferroni (the default): 95%% for all of a load point's verdicts together; none: each")
    ap.add_argument("--out", default=results_io.COMPARISON,
                    help=f"where to write {results_io.COMPARISON} (default: {results_io.COMPARISON} in the current "
                         "folder)")
    a = ap.parse_args(argv)
    allow = {k.strip() for k in a.allow.split(",") if k.strip()}
    unknown = allow - set(FIXED_KEYS)
    if unknown:
        print(f"error: --allow {','.join(sorted(unknown))}: not a fixed condition ({', '.join(FIXED_KEYS)})",
              file=sys.stderr)
        return 2
    from protocols.registry import get_protocol  # the command table's one way up (pyproject's import contracts)

    try:
        compare_experiments = get_protocol("compare").of_finished
        comparison = compare_experiments(a.experiments, allow, a.metric, margin=a.margin, adjust=a.adjust,
                                         tracking_uri=a.tracking_uri, allow_emulated=a.allow_emulated)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_comparison(comparison), flush=True)
    emulated = {n: k for n, k in comparison["kinds"].items() if k != "measured"}
    if emulated:  # never read as measured: say which side's numbers are a model's
        print("EMULATED: " + "; ".join(f"{n} is {k}" for n, k in emulated.items()), flush=True)
    out = Path(a.out)
    try:
        results_io.write_json(out, comparison)
    except OSError as e:
        print(f"error: --out {a.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"{results_io.COMPARISON} written: {out.resolve()}")
    answer = comparison.get("answer") or {}
    if answer.get("warnings"):  # what its replicates could not find (metrics.comparison.power_warnings)
        print("warnings:\n" + "\n".join(f"  {w}" for w in answer["warnings"]), flush=True)
    print(f"answer ({answer.get('protocol')}):\n" + "\n".join(f"  {x}" for x in answer.get("lines") or []),
          flush=True)
    return 0
