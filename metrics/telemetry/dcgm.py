"""A DCGM exporter's Prometheus page: GPU energy, power and load from NVIDIA's own agent."""

from __future__ import annotations

from engines import prometheus
from engines.http import http_get
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


def parse_dcgm(text: str) -> list[tuple[str, str, float]]:
    """(device, quantity, value) from a DCGM exporter page, read by the one strict
    Prometheus parser (``engines.prometheus``: a malformed line is an error naming it)."""
    samples, _ = prometheus.parse(text)
    out = []
    for s in samples:
        field = DCGM_FIELDS.get(s.name)
        if field is not None:
            qty, scale = field
            out.append((f"gpu{s.labels.get('gpu', '0')}", qty, s.value * scale))
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
        status, body = http_get(self.url, timeout=self.timeout_s)
        if status != 200:
            raise RuntimeError(f"HTTP {status}")
        return body.decode("utf-8", "replace")

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
