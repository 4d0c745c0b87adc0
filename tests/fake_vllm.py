"""A Python for ``engine=vllm engine.python=...`` that runs the fake engine
(``tests/fake_engine_process.py``) instead of vLLM: ``write_shim(path, extra)`` writes it.  The
adapter's launch command (``-m vllm.entrypoints.openai.api_server --model M --host H --port P
--max-num-seqs N ...``) reaches the fake engine with ``--as-vllm`` (flags it does not know
ignored), so a config's ``engine.features.max_num_seqs`` is the fake's batch limit; any other
use of the interpreter (``-c``) goes to the real one."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_shim(path: Path, *extra: str) -> Path:
    """An executable at ``path`` standing for vLLM's Python; ``extra``: the fake engine's own flags."""
    flags = " ".join(extra)
    path.write_text(f"#!/bin/sh\nexport PYTHONPATH={ROOT}\n"
                    f"if [ \"$1\" = -m ]; then shift 2; exec {sys.executable} -m tests.fake_engine_process --as-vllm "
                    f"{flags} \"$@\"; fi\nexec {sys.executable} \"$@\"\n")
    path.chmod(0o755)
    return path
