"""The ``tokenfactory`` command line: a table of subcommands, each one module of
``harness/commands/`` whose ``main(argv) -> int`` parses its arguments, calls one function and
returns the exit code.  ``tokenfactory --help`` lists them by concern."""

from __future__ import annotations

import importlib
import sys
from typing import NamedTuple


class Command(NamedTuple):
    module: str    # harness.commands.<module>
    group: str     # the heading it is listed under in --help
    synopsis: str  # its arguments, as --help shows them
    summary: str   # what it does


RUNNING, ANALYSING, PROMOTING, UTILITIES = ("running experiments", "analysing results",
                                            "step 7: promoting a candidate", "utilities")

COMMANDS: dict[str, Command] = {
    "run": Command("run", RUNNING, "[hydra overrides] [--dry-run]", "one run, a sweep, or a protocol (-m: multirun)"),
    "report": Command("report", ANALYSING,
                      "PATH_OR_EXPERIMENT [--import FILE_OR_DIR] [--static auto|true|false] [--out DIR]",
                      "(re)build report.html and figures/ of a run, sweep or experiment folder, or of an MLflow "
                      "experiment (downloaded first)"),
    "compare": Command("compare", ANALYSING, "EXP_A EXP_B ... [--allow KEY]",
                       "equal-SLO comparison of finished experiments"),
    "plan": Command("plan", ANALYSING, "EXPERIMENT... workload=... [overrides]",
                    "size and price a fleet for a trace from finished experiments' measured capacity "
                    "(protocol=plan)"),
    "track": Command("track", ANALYSING, "NAME [--gate] [--baseline previous|window:N|NAME]",
                     "a tracked benchmark's history across versions; the newest against a baseline, "
                     "regressed / improved / no significant change (--gate: exit 1 on a regression; protocol=track)"),
    "import": Command("import_", ANALYSING, "FILE OUT_DIR",
                      "another tool's result file (vllm bench serve, GuideLLM, AIPerf) as our run folder, for "
                      "report --import"),
    "roofline": Command("roofline", ANALYSING,
                        "engine.model=DIR hardware=NAME 'roofline.batch=[1,64]' roofline.context=2048",
                        "lower bounds per phase from the model's config.json"),
    "promote": Command("promote", PROMOTING, "[overrides]",
                       "shadow, canary stages, gates, rollback (run protocol=promote)"),
    "proxy": Command("proxy", PROMOTING, "proxy.incumbent=URL proxy.candidate=URL proxy.mode=shadow|canary|rollback",
                     "the promotion proxy, until Ctrl-C"),
    "workload": Command("workload", UTILITIES, "describe [overrides]",
                        "characterise a workload (workload.json + figures)"),
    "mlflow-sync": Command("mlflow_sync", UTILITIES, "PATH [--tracking-uri URI]",
                           "log a finished results folder to MLflow (one that could not reach it, or ran without "
                           "it)"),
}


def usage() -> str:
    lines = ["usage: tokenfactory COMMAND [ARGS]  (tokenfactory COMMAND --help: its arguments)"]
    for group in (RUNNING, ANALYSING, PROMOTING, UTILITIES):
        lines += ["", f"{group}:"]
        for name, c in COMMANDS.items():
            if c.group == group:
                lines += [f"  tokenfactory {name} {c.synopsis}", f"      {c.summary}"]
    lines += ["", "run hands its arguments to Hydra unchanged, so every Hydra override and flag works."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"error: unknown command {cmd!r}\n{usage()}", file=sys.stderr)
        return 2
    # imported on use: --help and a light command do not pay for Hydra, MLflow or plotly
    return importlib.import_module(f"harness.commands.{COMMANDS[cmd].module}").main(rest)


if __name__ == "__main__":
    sys.exit(main())
