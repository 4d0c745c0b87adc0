"""The ``tokenfactory`` command line.

    tokenfactory run [hydra overrides] [--dry-run]   one run, a sweep, or a protocol (-m: multirun)
    tokenfactory report PATH_OR_EXPERIMENT [--import FILE_OR_DIR] [--static auto|true|false] [--out DIR]
                                                (re)build report.html and figures/ of a run, sweep or experiment
                                                folder, or of an MLflow experiment (downloaded first)
    tokenfactory import FILE OUT_DIR            another tool's result file (vllm bench serve, GuideLLM, AIPerf)
                                                as our run folder, for report --import
    tokenfactory compare EXP_A EXP_B ... [--allow KEY]   equal-SLO comparison of finished experiments
    tokenfactory workload describe [overrides]  characterise a workload (workload.json + figures)
    tokenfactory roofline engine.model=DIR hardware=NAME 'roofline.batch=[1,64]' roofline.context=2048
                                                lower bounds per phase from the model's config.json
    tokenfactory proxy proxy.incumbent=URL proxy.candidate=URL proxy.mode=shadow|canary|rollback
                                                the promotion proxy, until Ctrl-C
    tokenfactory promote [overrides]            step 7: shadow, canary stages, gates, rollback (run protocol=promote)
    tokenfactory mlflow-sync PATH [--tracking-uri URI]   log a finished results folder to MLflow
                                                (one that could not reach it, or ran without it)

``run`` hands its arguments to Hydra unchanged, so every Hydra override and flag works.
"""

from __future__ import annotations

import errno
import os
import signal
import sys

USAGE = __doc__


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, ``kill``): handled as Ctrl-C is, so engines and telemetry are
    stopped and finished runs kept; Python's default would end the process on the spot."""


def _on_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up short
    raise Terminated()


DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _disk_full(e: OSError, out) -> None:
    """A full disk (or quota, or file-size limit) under output_dir: one clear message, exit 2."""
    where = e.filename or f"a results file under {out or 'results/'}"
    print(f"error: {os.strerror(e.errno)} while writing {where}. Finished load points are complete and kept "
          "(a folder without summary.json is not one, and no file under its final name is half-written); free "
          "some space and run the same command to resume.", file=sys.stderr, flush=True)
    sys.exit(2)


def _interrupted(e: KeyboardInterrupt) -> int:
    how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
    print(f"{how}: finished load points are complete and kept", file=sys.stderr, flush=True)
    return 143 if isinstance(e, Terminated) else 130


def _keys_to_env(argv: list[str]) -> list[str]:
    """``engine.api_key=VALUE`` (any ``*api_key`` override) becomes an environment variable and
    ``*api_key_env=`` naming it: Hydra writes every override to ``.hydra/overrides.yaml`` and
    its saved config, and a multirun prints each job's, so a key given on the command line
    would reach files and logs that the results' redaction never sees."""
    out = []
    for a in argv:
        key, eq, value = a.partition("=")
        bare = key.lstrip("+~")
        if eq and (bare == "api_key" or bare.endswith(".api_key")) and value not in ("", "null"):
            var = "TOKENFACTORY_" + bare.upper().replace(".", "_")
            os.environ[var] = value
            a = f"{key}_env={var}"
        out.append(a)
    return out


def _hydra_run(argv: list[str]) -> int:
    argv = _keys_to_env(argv)
    import hydra
    from omegaconf import DictConfig

    from harness.errors import UserError
    from harness.multirun import swept_keys
    from protocols.registry import Invocation, run_protocol

    swept = swept_keys(argv) if ("-m" in argv or "--multirun" in argv) else frozenset()

    @hydra.main(config_path="pkg://conf", config_name="config", version_base="1.3")
    def _main(cfg: DictConfig) -> None:
        from hydra.core.hydra_config import HydraConfig

        from conf.overrides import explicit_keys
        from harness.multirun import enter_launch_dir, write_job

        task = list(HydraConfig.get().overrides.task)
        enter_launch_dir()  # a launcher's job on another node starts where the command was typed
        try:
            write_job(run_protocol(cfg, Invocation(task, explicit_keys(task), swept)), "complete")
        except UserError as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            sys.exit(2)
        except KeyboardInterrupt as e:
            sys.exit(_interrupted(e))
        except OSError as e:
            if e.errno not in DISK_FULL:
                raise
            _disk_full(e, cfg.get("output_dir"))

    if "--dry-run" in argv:  # print the plan and stop
        argv = [a for a in argv if a != "--dry-run"] + ["protocol.dry_run=true"]
    sys.argv = ["tokenfactory run"] + argv
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        _main()
    except KeyboardInterrupt as e:  # during Hydra's own set-up or tear-down
        return _interrupted(e)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "run":
        return _hydra_run(rest)
    if cmd == "promote":
        return _hydra_run(["protocol=promote", *rest])
    if cmd == "proxy":
        from harness.proxy.command import proxy_command

        return proxy_command(rest)
    if cmd == "mlflow-sync":
        from harness.mlflow_sync import mlflow_sync_command

        return mlflow_sync_command(rest)
    if cmd == "roofline":
        from harness.roofline_command import roofline_command

        return roofline_command(rest)
    if cmd == "compare":
        from protocols.compare.record import compare_command

        return compare_command(rest)
    if cmd == "workload":
        from harness.workload_describe import describe_command

        return describe_command(rest)
    if cmd == "report":
        from harness.report.command import report_command

        return report_command(rest)
    if cmd == "import":
        from harness.imports.command import import_command

        return import_command(rest)
    print(f"error: unknown command {cmd!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
