"""``tokenfactory plan EXPERIMENT... [overrides]``: a fleet sized and priced for a traffic source
from finished experiments (``tokenfactory run protocol=plan 'protocol.experiments=[...]'``).
Arguments without ``=`` are the experiments' folders; the rest go to Hydra unchanged."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.commands import run


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    folders = [a for a in argv if "=" not in a and not a.startswith("-")]
    rest = [a for a in argv if a not in folders]
    for f in folders:
        if not Path(f).is_dir():
            print(f"error: {f}: no such experiment folder (tokenfactory plan EXPERIMENT_DIR ... [overrides])",
                  file=sys.stderr)
            return 2
    given = [json.dumps(str(Path(f).absolute())) for f in folders]   # a link keeps its name: the candidate's
    extra = [f"protocol.experiments=[{','.join(given)}]"] if folders else []
    return run.main(["protocol=plan", *extra, *rest])
