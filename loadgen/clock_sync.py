"""Another host's ``perf_counter_ns`` on this host's clock: offsets from round trips.

Two hosts' CLOCK_MONOTONIC have unrelated origins (boot time) and slightly different rates,
so a remote worker's times cannot be compared with the driver's as they are.  The driver
measures each worker's offset by round trips: it notes ``t_send``, asks the worker for its
clock (``t_remote``), notes ``t_recv``.  The worker read its clock somewhere between the two,
so the true offset (remote - driver) lies in ``[t_remote - t_recv, t_remote - t_send]``: the
midpoint is the estimate and half the round trip a hard bound on its error, whatever the
asymmetry of the two directions (NTP's reasoning, without its filters).  Of several round
trips the shortest wins (its bound is the tightest).

Measured again during the run, the offsets give a piecewise-linear model of the remote
clock (``ClockModel``): a time is converted with the offset interpolated between the
measurements bracketing it (constant beyond the first and last), so a rate difference
(drift, ppm) between the clocks is followed.  The model's error is the largest half round
trip of its measurements plus the part of any measurement's departure from the line through
its neighbours that their own bounds cannot explain (drift that is not linear between
measurements); on two steady clocks that second part is zero.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

# The columns of requests.parquet that hold times on the load generator's clock.
NS_COLUMNS = ("scheduled_ns", "slot_ns", "sent_ns", "first_token_ns", "end_ns", "done_ns")
NS_LIST_COLUMNS = ("chunk_ns",)


@dataclass(frozen=True)
class ClockSample:
    """One round trip: driver send time, the remote clock's reading, driver receive time."""

    t_send: int
    t_remote: int
    t_recv: int

    @property
    def rtt_ns(self) -> int:
        return self.t_recv - self.t_send

    @property
    def offset_ns(self) -> int:
        """remote - driver, at the midpoint of the round trip."""
        return self.t_remote - (self.t_send + self.t_recv) // 2


@dataclass(frozen=True)
class ClockPoint:
    """The best round trip of one measurement: where (remote clock), the offset, its bound."""

    t_remote: int
    offset_ns: int
    error_ns: int   # half the round trip: the offset is within +- this
    samples: int    # round trips it was chosen from


def best_of(samples: Sequence[ClockSample]) -> ClockPoint:
    """The shortest round trip of ``samples`` (its error bound is the smallest)."""
    if not samples:
        raise ValueError("no clock round trips to choose from")
    s = min(samples, key=lambda x: x.rtt_ns)
    if s.rtt_ns < 0:
        raise ValueError(f"a clock round trip ended before it started (send {s.t_send}, receive {s.t_recv})")
    return ClockPoint(s.t_remote, s.offset_ns, (s.rtt_ns + 1) // 2, len(samples))


def measure(read_remote: Callable[[], int], n: int, now: Callable[[], int]) -> ClockPoint:
    """``n`` round trips through ``read_remote`` (returns the remote clock), timed by ``now``."""
    samples = []
    for _ in range(max(int(n), 1)):
        a = now()
        r = read_remote()
        b = now()
        samples.append(ClockSample(a, int(r), b))
    return best_of(samples)


@dataclass
class ClockModel:
    """A remote clock on the driver's: offsets measured over a run, interpolated between."""

    points: list[ClockPoint] = field(default_factory=list)

    def add(self, p: ClockPoint) -> None:
        self.points.append(p)
        self.points.sort(key=lambda q: q.t_remote)

    def _xy(self) -> tuple[int, np.ndarray, np.ndarray]:
        if not self.points:
            raise ValueError("no clock measurement: the remote times cannot be converted")
        ref = self.points[0].t_remote  # interpolate on small numbers: float64 keeps the ns exact
        x = np.array([p.t_remote - ref for p in self.points], dtype=np.float64)
        y = np.array([p.offset_ns for p in self.points], dtype=np.float64)
        return ref, x, y

    def offset_at(self, t_remote) -> np.ndarray:
        """The offset (remote - driver, ns) at remote time(s) ``t_remote``."""
        ref, x, y = self._xy()
        t = np.asarray(t_remote, dtype=np.int64)
        return np.rint(np.interp((t - ref).astype(np.float64), x, y)).astype(np.int64)

    def to_driver(self, t_remote) -> np.ndarray:
        """Remote ``perf_counter_ns`` value(s) -> the driver's clock."""
        t = np.asarray(t_remote, dtype=np.int64)
        return t - self.offset_at(t)

    def to_remote(self, t_driver: int) -> int:
        """A driver time -> the remote clock, with the latest offset (where a schedule starts)."""
        if not self.points:
            raise ValueError("no clock measurement: the start time cannot be given to the worker")
        return int(t_driver) + self.points[-1].offset_ns

    @property
    def measurement_error_ns(self) -> int:
        return max((p.error_ns for p in self.points), default=0)

    @property
    def interpolation_error_ns(self) -> int:
        """How far a measurement departs from the line through its neighbours beyond what the
        three bounds allow: drift that changes between measurements (0 on steady clocks)."""
        worst = 0
        pts = self.points
        for a, b, c in zip(pts, pts[1:], pts[2:]):
            span = c.t_remote - a.t_remote
            if span <= 0:
                continue
            pred = a.offset_ns + (c.offset_ns - a.offset_ns) * (b.t_remote - a.t_remote) / span
            excess = abs(pred - b.offset_ns) - b.error_ns - max(a.error_ns, c.error_ns)
            worst = max(worst, int(excess))
        return worst

    @property
    def error_ns(self) -> int:
        """The bound on a converted time's error: measurement + unexplained interpolation error."""
        return self.measurement_error_ns + self.interpolation_error_ns

    @property
    def drift_ppm(self) -> float:
        """Rate difference of the two clocks (remote faster: positive), from the first and last
        measurement; NaN with fewer than two or no time between them."""
        if len(self.points) < 2 or self.points[-1].t_remote == self.points[0].t_remote:
            return float("nan")
        a, b = self.points[0], self.points[-1]
        return (b.offset_ns - a.offset_ns) / (b.t_remote - a.t_remote) * 1e6

    def describe(self) -> dict:
        """Per-worker figures for the run's stats and summary."""
        return {"offset_ms": self.points[-1].offset_ns / 1e6 if self.points else float("nan"),
                "error_ms": self.error_ns / 1e6,
                "measurement_error_ms": self.measurement_error_ns / 1e6,
                "interpolation_error_ms": self.interpolation_error_ns / 1e6,
                "drift_ppm": self.drift_ppm, "measurements": len(self.points),
                "min_rtt_ms": 2 * min((p.error_ns for p in self.points), default=0) / 1e6}


def convert_table(table: pa.Table, model: ClockModel) -> pa.Table:
    """Rows of ``requests.parquet`` from a remote worker with every time on the driver's clock
    (nulls stay null)."""
    for name in NS_COLUMNS:
        col = table.column(name).combine_chunks()
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        vals = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        conv = np.where(valid, model.to_driver(vals), 0)
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(conv, pa.int64(), mask=~valid))
    for name in NS_LIST_COLUMNS:
        col = table.column(name).combine_chunks()
        flat = col.values.to_numpy(zero_copy_only=False).astype(np.int64)  # (offsets index the whole child)
        conv = pa.ListArray.from_arrays(col.offsets, pa.array(model.to_driver(flat), pa.int64()), mask=col.is_null())
        table = table.set_column(table.schema.get_field_index(name), name, conv)
    return table
