"""The shared retry loop (engines/http.py): a wait timed by its first success."""

from __future__ import annotations

import engines.http as http


class Clock:
    def __init__(self):
        self.t = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s


def _detected(monkeypatch, ready_at: float, **kw) -> tuple[float, Clock]:
    clock = Clock()
    monkeypatch.setattr(http.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(http.time, "sleep", clock.sleep)
    assert http.retry_until(lambda: clock.t >= ready_at, 60.0, 0.5, **kw)
    return clock.t, clock


def test_a_fixed_poll_reads_a_wait_on_its_grid(monkeypatch):
    # an engine healthy 1.23 s after launch is seen at 1.5 s: the 0.5 s grid of the start-up
    # times measured live (0.55, 1.05 to 1.15, 1.62, 2.0 s)
    t, clock = _detected(monkeypatch, 1.23)
    assert t == 1.5 and clock.sleeps == [0.5, 0.5, 0.5]


def test_a_poll_at_a_share_of_the_wait_reads_it_to_that_share(monkeypatch):
    t, clock = _detected(monkeypatch, 1.23, resolution=0.02)
    assert 1.23 <= t <= 1.23 * 1.02 + http.MIN_POLL_S
    assert clock.sleeps[0] == http.MIN_POLL_S and max(clock.sleeps) <= 0.5
    # a long start (a minute) polls at most every 0.5 s: 281 calls in 59 s (50 in its first second), not 2950
    t, clock = _detected(monkeypatch, 59.0, resolution=0.02)
    assert t - 59.0 <= 0.5 and len(clock.sleeps) == 281 and clock.sleeps[-1] == 0.5
