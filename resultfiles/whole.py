"""A file written whole or not at all: under a temp name beside it, then renamed over it."""

from __future__ import annotations

import os
from pathlib import Path

# What a file is called while it is written (a reader never takes it for the finished file).
PARTIAL = ".partial"


def partial_path(path: str | os.PathLike) -> str:
    """The name ``path`` has while it is written."""
    return os.fspath(path) + PARTIAL


def replace_whole(path: str | os.PathLike, write) -> None:
    """``write(tmp)`` beside ``path``, then renamed over it: a reader sees the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(partial_path(path))
    try:
        write(tmp)
    except BaseException as e:
        tmp.unlink(missing_ok=True)  # a full disk: give back what the half-written copy took
        if isinstance(e, OSError) and e.filename is None:
            e.filename = str(path)  # (a failed write, unlike a failed open, does not name the file)
        raise
    os.replace(tmp, path)
