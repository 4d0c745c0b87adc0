"""``tokenfactory run [hydra overrides] [--dry-run]``: one run, a sweep, or a protocol (``-m``: a
Hydra multirun).  The arguments go to Hydra unchanged, so every Hydra override and flag works;
``protocols.registry.run_protocol`` runs the composed config through its protocol."""

from __future__ import annotations

import os
import signal
import sys

from harness.commands.interrupts import DISK_FULL, disk_full, interrupted, on_sigterm


def keys_to_env(argv: list[str]) -> list[str]:
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


def main(argv: list[str]) -> int:
    argv = keys_to_env(argv)
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
            sys.exit(interrupted(e))
        except OSError as e:
            if e.errno not in DISK_FULL:
                raise
            disk_full(e, cfg.output_dir)

    if "--dry-run" in argv:  # print the plan and stop
        argv = [a for a in argv if a != "--dry-run"] + ["protocol.dry_run=true"]
    sys.argv = ["tokenfactory run"] + argv
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        _main()
    except KeyboardInterrupt as e:  # during Hydra's own set-up or tear-down
        return interrupted(e)
    return 0
