"""``tokenfactory promote [overrides]``: step 7 (shadow, canary stages, gates, rollback), which is
``tokenfactory run protocol=promote``."""

from __future__ import annotations

from harness.commands import run


def main(argv: list[str]) -> int:
    return run.main(["protocol=promote", *argv])
