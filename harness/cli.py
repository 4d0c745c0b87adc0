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

``run`` hands its arguments to Hydra unchanged, so every Hydra override and flag works.
"""

from __future__ import annotations

import sys

USAGE = __doc__


def _hydra_run(argv: list[str]) -> int:
    if "protocol=tune" in argv:  # a multirun of its own, under Hydra's Optuna sweeper
        from harness.tune import tune_command

        return tune_command(argv)
    import hydra
    from omegaconf import DictConfig

    from harness.errors import UserError
    from harness.experiment import run_experiment
    from harness.multirun import swept_keys

    swept = swept_keys(argv) if ("-m" in argv or "--multirun" in argv) else frozenset()

    @hydra.main(config_path="pkg://conf", config_name="config", version_base="1.3")
    def _main(cfg: DictConfig) -> None:
        from hydra.core.hydra_config import HydraConfig

        from conf.overrides import explicit_keys
        from harness.multirun import enter_launch_dir, write_job

        task = list(HydraConfig.get().overrides.task)
        enter_launch_dir()  # a launcher's job on another node starts where the command was typed
        try:
            write_job(run_experiment(cfg, swept, explicit_keys(task), overrides=task), "complete")
        except UserError as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            sys.exit(2)
        except KeyboardInterrupt:
            print("interrupted: finished load points are complete and kept", file=sys.stderr)
            sys.exit(130)

    if "--dry-run" in argv:  # print the plan and stop
        argv = [a for a in argv if a != "--dry-run"] + ["protocol.dry_run=true"]
    sys.argv = ["tokenfactory run"] + argv
    _main()
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
    if cmd == "roofline":
        from harness.roofline_command import roofline_command

        return roofline_command(rest)
    if cmd == "compare":
        from harness.comparison import compare_command

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
