"""``tokenfactory proxy proxy.incumbent=URL proxy.candidate=URL proxy.mode=shadow|canary|rollback
[overrides]``: the promotion proxy on its own, until Ctrl-C (``harness.proxy.standalone``)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from conf.schema import ConfigError, validate
    from harness.experiment import compose_config
    from harness.proxy.standalone import StandaloneProxy

    try:
        cfg = compose_config(argv)
        validate(cfg)
        proxy = StandaloneProxy(cfg)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - Hydra's composition errors: the override is in the message
        print(f"error: {e} {e.__cause__ or ''}".strip(), file=sys.stderr)
        return 2
    proxy.serve()
    return 0
