"""CPU package energy from RAPL (``/sys/class/powercap``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from metrics.telemetry.base import Sampler


class RaplSampler(Sampler):
    """CPU package energy from ``/sys/class/powercap/intel-rapl:N/energy_uj`` (AMD uses the same).

    The counter wraps at ``max_energy_range_uj``; that range goes into the table once as
    ``<package>.energy_counter_range_j`` so the integration can undo wraps.
    """

    source = "rapl"
    measures_energy = True

    def __init__(self, root: str | os.PathLike = "/sys/class/powercap"):
        self.root = Path(root)
        self.zones: dict[str, Path] = {}
        self._ranges_written = False

    def available(self) -> tuple[bool, str]:
        if not self.root.is_dir():
            return False, f"{self.root} does not exist (no RAPL powercap interface on this host or in this container)"
        zones = sorted(p for p in self.root.glob("intel-rapl:*") if re.fullmatch(r"intel-rapl:\d+", p.name))
        if not zones:
            return False, f"{self.root}: no intel-rapl:N package zone"
        for z in zones:
            try:
                name = (z / "name").read_text().strip()
                int((z / "energy_uj").read_text())
            except PermissionError:
                return False, (f"{z / 'energy_uj'} is not readable by this user (root only since Linux 5.10, "
                               "CVE-2020-8694)")
            except (OSError, ValueError) as e:
                return False, f"{z / 'energy_uj'}: {type(e).__name__}: {e}"
            self.zones[name] = z
        return True, ""

    def sample(self, now_ns: int) -> list[tuple]:
        rows = []
        for name, z in self.zones.items():
            if not self._ranges_written:
                try:
                    rng = int((z / "max_energy_range_uj").read_text())
                    rows.append((now_ns, self.source, f"{name}.energy_counter_range_j", rng * 1e-6, None))
                except (OSError, ValueError):
                    pass
            rows.append((now_ns, self.source, f"{name}.energy_counter_j", int((z / "energy_uj").read_text()) * 1e-6,
                         None))
        self._ranges_written = True
        return rows
