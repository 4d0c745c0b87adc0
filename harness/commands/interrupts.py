"""How a command that writes results stops: Ctrl-C, SIGTERM and a full disk, each with one
clear message and its exit code.  Used inside Hydra's task function (``harness.commands.run``),
since Hydra reports and swallows an exception that leaves it."""

from __future__ import annotations

import errno
import os
import signal
import sys


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, ``kill``): handled as Ctrl-C is, so engines and telemetry are
    stopped and finished runs kept; Python's default would end the process on the spot."""


def on_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up short
    raise Terminated()


DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def disk_full(e: OSError, out) -> None:
    """A full disk (or quota, or file-size limit) under output_dir: one clear message, exit 2."""
    where = e.filename or f"a results file under {out or 'results/'}"
    print(f"error: {os.strerror(e.errno)} while writing {where}. Finished load points are complete and kept "
          "(a folder without summary.json is not one, and no file under its final name is half-written); free "
          "some space and run the same command to resume.", file=sys.stderr, flush=True)
    sys.exit(2)


def interrupted(e: KeyboardInterrupt) -> int:
    how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
    print(f"{how}: finished load points are complete and kept", file=sys.stderr, flush=True)
    return 143 if isinstance(e, Terminated) else 130
