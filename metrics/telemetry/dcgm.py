"""A DCGM exporter's Prometheus page: GPU energy, power and load from NVIDIA's own agent."""

from __future__ import annotations

import re
import urllib.request

from metrics.telemetry.base import Sampler

# DCGM exporter fields -> (our quantity, scale to our unit).  Energy is mJ since boot, power W.
DCGM_FIELDS = {
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_counter_j", 1e-3),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu_percent", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", 1024 * 1024),  # MiB
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
}
_PROM_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_dcgm(text: str) -> list[tuple[str, str, float]]:
    """(device, quantity, value) from a DCGM exporter page (Prometheus text format)."""
    out = []
    for line in text.splitlines():
        if not line.startswith("DCGM_FI_"):
            continue
        m = _PROM_LINE.match(line)
        if not m or m.group(1) not in DCGM_FIELDS:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        qty, scale = DCGM_FIELDS[m.group(1)]
        out.append((f"gpu{labels.get('gpu', '0')}", qty, value * scale))
    return out


class DcgmSampler(Sampler):
    """Scrapes a DCGM exporter (``telemetry.dcgm.url``, e.g. ``http://127.0.0.1:9400/metrics``).

    The exporter refreshes its values on its own period (``-c``, 30 s by default): set it
    well below the run length, or the window's edges fall between two refreshes.
    """

    source = "dcgm"
    measures_energy = True

    def __init__(self, url: str | None, timeout_s: float = 2.0):
        self.url = url
        self.timeout_s = timeout_s

    def _fetch(self) -> str:
        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:  # noqa: S310 - a configured URL
            return resp.read().decode("utf-8", "replace")

    def available(self) -> tuple[bool, str]:
        if not self.url:
            return False, "telemetry.dcgm.url is not set (no DCGM exporter configured)"
        try:
            vals = parse_dcgm(self._fetch())
        except Exception as e:  # noqa: BLE001 - connection refused, timeout, bad URL
            return False, f"telemetry.dcgm.url={self.url}: {type(e).__name__}: {e}"
        if not any(q in ("energy_counter_j", "power_w") for _, q, _ in vals):
            return False, (f"telemetry.dcgm.url={self.url}: no DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION or "
                           "DCGM_FI_DEV_POWER_USAGE on the page")
        return True, ""

    def sample(self, now_ns: int) -> list[tuple]:
        return [(now_ns, self.source, f"{dev}.{qty}", v, None) for dev, qty, v in parse_dcgm(self._fetch())]
