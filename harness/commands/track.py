"""``tokenfactory track NAME [--gate] [--baseline previous|window:N|NAME] [--metric M]...``: a
tracked benchmark's history (every experiment run with ``track=NAME`` into the MLflow store),
the newest against its baseline metric by metric (regressed, improved, no significant change),
written to ``track.json`` and the history page ``track.html`` (``--out``, default
results/track/NAME/).  ``--gate`` fails closed: exit 1 when a metric regressed (the interval of
the difference excludes zero and the effect is beyond the margin), naming metric, size,
interval and both versions; 3 when a metric the baseline has cannot be judged on the newest
(no point runs, an infinite cost, no interval); 2 for an error; 0 otherwise.

The flags are ``protocol=track``'s config (``conf.schema.TrackProtocol``) under other names:
``overrides`` translates them to Hydra overrides (``tokenfactory run protocol=track
protocol.track=NAME ...`` is the same command) and the registry runs the protocol."""

from __future__ import annotations

import argparse
import re
import sys

EPILOG = """exit codes with --gate:
  0  passed: no metric regressed and every metric the baseline has was judged
  1  regressed: a metric's interval excludes zero and the effect is beyond the margin
  2  error: no such track or baseline, conditions that differ, a bad flag
  3  cannot judge: a metric the baseline has cannot be compared on the newest (no point runs,
     the metric missing, an infinite cost: no good tokens, one run: no interval); never a pass
without --gate: 0, or 2 for an error
the same as: tokenfactory run protocol=track protocol.track=NAME [protocol.gate=true] ... (conf/protocol/track.yaml)"""


def parser() -> argparse.ArgumentParser:
    # defaults are the schema's (TrackProtocol): a flag not given adds no override
    ap = argparse.ArgumentParser(
        prog="tokenfactory track", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="a tracked benchmark's history and a regression gate: the newest experiment against a baseline",
        epilog=EPILOG)
    ap.add_argument("name", help="the tracked benchmark (the experiments ran with track=NAME)")
    ap.add_argument("--gate", action="store_true", help="exit 1 on a regression beyond the margin, 3 when a "
                                                        "metric cannot be judged (below)")
    ap.add_argument("--baseline",
                    help="previous (default), window:N (the N accepted experiments before the newest, pooled), "
                         "or an earlier experiment's run id, folder name or version")
    ap.add_argument("--keep-rejected", action="store_true",
                    help="window:N pools the experiments the gate rejected too (default: left out)")
    ap.add_argument("--at", help="judge this experiment (run id, folder name or version) as the history stood "
                                 "when it was the newest (default: the newest)")
    ap.add_argument("--metric", action="append", help="a metric to compare (repeatable; default: the usual set)")
    ap.add_argument("--margin", type=float,
                    help="smallest relative change that counts (0.02); where a side's mean is 0, the smallest "
                         "absolute one: 0.02 = 2 points for a rate")
    ap.add_argument("--confidence", type=float, help="level of the intervals (0.95)")
    ap.add_argument("--adjust", choices=("bonferroni", "none"),
                    help="bonferroni (default): the confidence holds for every verdict the gate judges together "
                         "(metrics x load points); none: for each")
    ap.add_argument("--allow", help="track conditions allowed to differ (comma-separated)")
    ap.add_argument("--tracking-uri", help="the MLflow store (default: $MLFLOW_TRACKING_URI, else "
                                           "sqlite:///results/mlflow.db)")
    ap.add_argument("--out", help="folder for track.json and track.html (default: results/track/NAME)")
    return ap


def quoted(value: str) -> str:
    """``value`` as a Hydra quoted string, read back unchanged: a quote escaped, the backslashes
    before a quote or the end doubled, an interpolation (``${``) escaped."""
    s = re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), value)
    return "'" + s.replace("${", "\\${") + "'"


def _listed(values: list[str]) -> str:
    return "[" + ",".join(quoted(v) for v in values) + "]"


def overrides(argv: list[str]) -> list[str]:
    """The command line's flags as ``protocol=track``'s Hydra overrides (argparse's errors exit 2)."""
    a = parser().parse_args(argv)
    allow = None if a.allow is None else [k.strip() for k in a.allow.split(",") if k.strip()]
    given = {  # override -> its value, None where the flag was not given
        "protocol.gate": "true" if a.gate else None,
        "protocol.baseline": _maybe(quoted, a.baseline),
        "protocol.keep_rejected": "true" if a.keep_rejected else None,
        "protocol.at": _maybe(quoted, a.at),
        "protocol.metrics": _listed(a.metric) if a.metric else None,
        "protocol.margin": _maybe(repr, a.margin),
        "protocol.confidence": _maybe(repr, a.confidence),
        "protocol.adjust": a.adjust,
        "protocol.allow": _maybe(_listed, allow),
        "mlflow.tracking_uri": _maybe(quoted, a.tracking_uri),
        "output_dir": _maybe(quoted, a.out),
    }
    return ["protocol=track", f"protocol.track={quoted(a.name)}",
            *(f"{key}={value}" for key, value in given.items() if value is not None)]


def _maybe(spell, value):
    """``spell(value)``, or None for a flag not given."""
    return None if value is None else spell(value)


def main(argv: list[str]) -> int:
    given = overrides(argv)
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from conf.compose import compose_config
    from conf.overrides import explicit_keys
    from harness.errors import UserError
    from protocols.registry import Invocation, run_protocol

    try:
        cfg = compose_config(given)
        run_protocol(cfg, Invocation(given, explicit_keys(given)))
    except SystemExit as e:  # the gate's verdict (protocols.track.run.gate_code)
        return int(e.code or 0)
    except (UserError, HydraException, OmegaConfBaseException) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
