"""Runs ``tokenfactory`` commands in forked children of one process that imported the harness once.

A test that interrupts a sweep twenty times would otherwise pay the interpreter's start and
the harness's imports (seconds on a busy 2-core machine) for every attempt.  Each child is a
real process running ``harness.cli.main(argv)`` from a clean fork (nothing ran in the parent
but imports), so a signal sent to it meets the harness exactly as it would after ``exec``.
The parent is a child subreaper: processes a killed child leaves behind (its telemetry
sampler, an engine) are reparented here and reported as ``leftover``.

Protocol (JSON lines): stdin ``{"argv": [...], "cwd": DIR, "log": FILE, "env": {...}, "fsize": BYTES}``
-> stdout
``{"pid": N}`` at once, then ``{"rc": CODE, "leftover": [cmdline, ...]}`` when it exits.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
import traceback

PR_SET_CHILD_SUBREAPER = 36


def _children() -> list[tuple[int, str]]:
    """This process's children (the subreaper's adopted orphans among them)."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            if int(ppid) == me and state != "Z":  # (a zombie has exited: only reaped below)
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    out.append((int(d), f.read().replace(b"\0", b" ").decode(errors="replace").strip()))
        except (OSError, ValueError, IndexError):
            pass
    return out


def _reap() -> None:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _child(req: dict) -> None:
    os.setpgid(0, 0)  # its own process group, as a command started from a shell has
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(req["cwd"])
    os.environ.update(req.get("env") or {})
    if req.get("fsize"):  # a file-size limit: writes past it fail with EFBIG (where no tmpfs can be mounted)
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (req["fsize"], req["fsize"]))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from harness.cli import main

    code = 1
    try:
        code = main(req["argv"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - as the interpreter would: a traceback (the test reads it)
        traceback.print_exc()
        code = 130 if isinstance(sys.exc_info()[1], KeyboardInterrupt) else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # What a run imports, once (the children share it): the command and the protocols it finds
    # by name, and the tokenizer's library (torch and transformers: most of a child's set-up,
    # 5-8 s of 8-11 s on a busy 2-core host, when each child imported them itself).
    import transformers.models.auto.tokenization_auto
    import transformers.tokenization_utils_fast  # noqa: F401

    import harness.cli
    import harness.commands.run
    import harness.engine_session
    import harness.point  # noqa: F401
    import loadgen.workloads.prompts  # noqa: F401
    import protocols.experiment
    import protocols.registry  # noqa: F401

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:  # never back into this loop: a second zygote would answer the test's requests
                _child(req)
            except KeyboardInterrupt:  # Ctrl-C before the child's own handling began
                os._exit(130)
            finally:
                os._exit(1)
        try:
            os.setpgid(pid, pid)  # here too, so that it is a group before the test can signal one
        except OSError:
            pass
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        # Orphans of the child are reparented here; a helper that ends by itself once its parent
        # is gone (the telemetry process at its pipe's end) gets a few seconds to do so.
        deadline = time.monotonic() + 5
        while _children() and time.monotonic() < deadline:
            time.sleep(0.1)
            _reap()
        leftover = []
        for cpid, cmd in _children():
            leftover.append(cmd)
            try:
                os.kill(cpid, signal.SIGKILL)
                os.waitpid(cpid, 0)
            except OSError:
                pass
        _reap()
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "leftover": leftover}), flush=True)


if __name__ == "__main__":
    main()
