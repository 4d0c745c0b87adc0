"""What every telemetry source shares: the row format of ``telemetry.parquet`` and the
``Sampler`` interface.

Each sampler returns rows ``(time_ns, source, name, value, detail)``.  ``time_ns`` is
``time.perf_counter_ns()``, the clock of ``requests.parquet``.  Names are
``<device>.<quantity>_<unit>`` (``gpu0.power_w``, ``gpu0.energy_counter_j``,
``package-0.energy_counter_j``, ``cpu_percent.core3``).

A source that cannot be read on this host is recorded once as unavailable with the reason
(``name = 'unavailable'``, ``value`` NaN, reason in ``detail``); one quantity a device does
not support is recorded once as ``name`` with NaN and ``detail = 'unavailable: why'``.
Never zeros: a zero would read as a measurement.  Marks (``source = 'mark'``) put events
such as the idle baseline on the same clock.
"""

from __future__ import annotations

import math

import pyarrow as pa

SCHEMA = pa.schema([("time_ns", pa.int64()), ("source", pa.string()), ("name", pa.string()),
                    ("value", pa.float64()), ("detail", pa.string())])

UNAVAILABLE = "unavailable"
MARK = "mark"
# Sources that measure energy or power (the others describe load).
ENERGY_SOURCES = ("nvml", "dcgm", "rapl")


class Sampler:
    source = "base"
    measures_energy = False

    def available(self) -> tuple[bool, str]:
        return True, ""

    def sample(self, now_ns: int) -> list[tuple]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class OnceFailures:
    """Records a quantity that failed to read once, then stops asking for it."""

    def __init__(self, source: str):
        self.source = source
        self.failed: set[str] = set()

    def read(self, rows: list, now_ns: int, name: str, fn, scale: float = 1.0) -> None:
        if name in self.failed:
            return
        try:
            v = fn()
        except Exception as e:  # noqa: BLE001 - NVMLError_NotSupported and friends
            self.failed.add(name)
            rows.append((now_ns, self.source, name, math.nan, f"{UNAVAILABLE}: {type(e).__name__}: {e}"))
            return
        rows.append((now_ns, self.source, name, float(v) * scale, None))
