"""A ``telemetry.parquet`` table indexed for reading: time series per (source, device,
quantity), the sources that were unavailable and why, and the marks (window edges, idle
baseline).  ``metrics.energy`` integrates its series."""

from __future__ import annotations

import math
import re
from collections import defaultdict

import numpy as np
import pyarrow as pa

from metrics.telemetry.base import MARK, UNAVAILABLE
from resultfiles import parquet

ACCELERATOR_SOURCES = ("nvml", "dcgm")  # in order of preference (NVML is read locally)
CPU_SOURCES = ("rapl",)
_QTY = re.compile(r"^(?P<dev>.+)\.(?P<qty>energy_counter_j|energy_counter_range_j|power_w)$")


class TelemetryIndex:
    """A ``telemetry.parquet`` table, indexed for energy: series per (source, device)."""

    def __init__(self, table: pa.Table | None):
        self.series: dict[str, dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]] = defaultdict(dict)
        self.unavailable: dict[str, str] = {}
        self.quantity_notes: dict[tuple[str, str], str] = {}
        self.marks: dict[str, list[int]] = defaultdict(list)
        if table is None:
            return
        d = table.to_pydict()
        acc: dict = defaultdict(lambda: ([], []))
        for t, src, name, val, detail in zip(d["time_ns"], d["source"], d["name"], d["value"], d["detail"]):
            if src == MARK:
                self.marks[name].append(int(t))
                continue
            if name == UNAVAILABLE:
                self.unavailable[src] = detail or "unavailable"
                continue
            m = _QTY.match(name or "")
            if not m:
                continue
            if val is None or (isinstance(val, float) and math.isnan(val)):
                if detail:
                    self.quantity_notes[(src, m["dev"])] = f"{m['qty']} {detail}"
                continue
            ts, vs = acc[(src, m["dev"], m["qty"])]
            ts.append(t)
            vs.append(val)
        for (src, dev, qty), (ts, vs) in acc.items():
            self.series[src].setdefault(dev, {})[qty] = (np.asarray(ts, dtype=np.int64), np.asarray(vs, dtype=float))

    @classmethod
    def read(cls, path) -> TelemetryIndex:
        return cls(parquet.read_table(path))

    def interval(self, start_mark: str, end_mark: str) -> tuple[int, int] | None:
        a, b = self.marks.get(start_mark), self.marks.get(end_mark)
        if not a or not b or b[-1] <= a[-1]:
            return None
        return a[-1], b[-1]

    def scope(self) -> tuple[str | None, str]:
        """The source the window energy is taken from, and its scope's name."""
        for src in ACCELERATOR_SOURCES:
            if self.series.get(src):
                return src, "accelerators"
        for src in CPU_SOURCES:
            if self.series.get(src):
                return src, "cpu_packages"
        return None, ""

    def why_unavailable(self) -> str:
        if not self.unavailable:
            return "no power or energy samples were recorded"
        parts = [f"{src}: {self.unavailable[src]}" for src in (*ACCELERATOR_SOURCES, *CPU_SOURCES)
                 if src in self.unavailable]
        return "no power or energy source on this host (" + "; ".join(parts) + ")"
