"""``tokenfactory proxy proxy.incumbent=URL proxy.candidate=URL proxy.mode=shadow|canary|rollback
[overrides]``: the promotion proxy on its own, until Ctrl-C (``harness.proxy.standalone``).

    tokenfactory proxy proxy.incumbent=http://127.0.0.1:8000 proxy.candidate=http://127.0.0.1:8001 \
        proxy.mode=shadow proxy.port=8080

Every proxy.* key (port, canary_share, cpus, realtime, ...) is in the configuration reference
(docs/reference/configuration.md)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from conf.schema import ConfigError, validate
    from conf.compose import compose_config
    from harness.proxy.standalone import StandaloneProxy

    if any(a in ("-h", "--help", "help") for a in argv):  # Hydra would read it as an override
        print(__doc__)
        return 0
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
