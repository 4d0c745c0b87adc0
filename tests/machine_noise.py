"""How noisy the machine was while a timing test ran: a probe process that sleeps 1 ms in a
loop and keeps its worst oversleep.

Timing tests here share two cores with other work; when a probe that does nothing else was
itself held off a CPU for tens of ms, a late timer or a late chunk in the same window says
nothing about the code under test, and the test runs again (``attempts``).
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager

_PROBE = r"""
import signal, sys, time
worst = 0.0
def done(*_):
    print(f"{worst * 1e3:.3f}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
print("ready", flush=True)
while True:
    t = time.perf_counter()
    time.sleep(0.001)
    worst = max(worst, time.perf_counter() - t - 0.001)
"""


class Noise:
    worst_ms: float = float("nan")  # the probe's worst oversleep in the window


@contextmanager
def machine_noise():
    """``with machine_noise() as n: ...``; afterwards ``n.worst_ms``."""
    p = subprocess.Popen([sys.executable, "-c", _PROBE], stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    n = Noise()
    try:
        yield n
    finally:
        p.terminate()
        out = p.communicate(timeout=10)[0].strip()
        n.worst_ms = float(out) if out else float("nan")


def attempts(run, quiet_ms: float = 50.0, tries: int = 3):
    """``run()`` until the probe's worst stall stays under ``quiet_ms`` (at most ``tries``
    times); returns the quietest attempt's result and its noise."""
    best = None
    for _ in range(tries):
        with machine_noise() as n:
            result = run()
        if best is None or n.worst_ms < best[1]:
            best = (result, n.worst_ms)
        if n.worst_ms < quiet_ms:
            break
    return best
