"""NVIDIA GPUs through NVML (``nvidia-ml-py``): the per-GPU total-energy counter is the
primary energy source; power, clocks, utilisation, memory and temperature beside it."""

from __future__ import annotations

import importlib

from metrics.telemetry.base import OnceFailures, Sampler


class NvmlSampler(Sampler):
    """Per GPU: total-energy counter (mJ since driver load -> J), power, SM/memory clocks,
    utilisation, memory used, temperature.  ``nvml`` lets tests pass a fake module."""

    source = "nvml"
    measures_energy = True

    def __init__(self, devices: list[int] | None = None, nvml=None):
        self._nv = nvml
        self.devices = devices
        self.handles: dict[int, object] = {}
        self._fail = OnceFailures(self.source)
        self._started = False

    def available(self) -> tuple[bool, str]:
        nv = self._nv
        if nv is None:
            try:
                nv = importlib.import_module("pynvml")
            except ImportError as e:
                return False, f"nvidia-ml-py is not installed ({e})"
        try:
            nv.nvmlInit()
        except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, _DriverNotLoaded ...
            return False, f"NVML did not start ({type(e).__name__}: {e}): no NVIDIA GPU or driver on this host"
        self._nv, self._started = nv, True
        n = int(nv.nvmlDeviceGetCount())
        if n == 0:
            return False, "NVML sees no GPU"
        wanted = list(range(n)) if self.devices is None else [int(i) for i in self.devices]
        bad = [i for i in wanted if not 0 <= i < n]
        if bad:
            return False, f"telemetry.nvml.devices: GPU index {bad[0]} does not exist (NVML sees {n} GPUs)"
        self.handles = {i: nv.nvmlDeviceGetHandleByIndex(i) for i in wanted}
        return True, ""

    def sample(self, now_ns: int) -> list[tuple]:
        nv, rows, r = self._nv, [], self._fail.read
        for i, h in self.handles.items():
            d = f"gpu{i}"
            # (each lambda is called at once by ``r``, inside this iteration: h is this GPU's)
            r(rows, now_ns, f"{d}.energy_counter_j", lambda h=h: nv.nvmlDeviceGetTotalEnergyConsumption(h), 1e-3)
            r(rows, now_ns, f"{d}.power_w", lambda h=h: nv.nvmlDeviceGetPowerUsage(h), 1e-3)
            r(rows, now_ns, f"{d}.sm_clock_mhz", lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
            r(rows, now_ns, f"{d}.mem_clock_mhz", lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
            try:
                util, err = nv.nvmlDeviceGetUtilizationRates(h), None
            except Exception as e:  # noqa: BLE001 - recorded below, once per quantity
                util, err = None, e

            def rate(attr, util=util, err=err):
                if err is not None:
                    raise err
                return getattr(util, attr)

            r(rows, now_ns, f"{d}.util_gpu_percent", lambda: rate("gpu"))
            r(rows, now_ns, f"{d}.util_mem_percent", lambda: rate("memory"))
            r(rows, now_ns, f"{d}.mem_used_bytes", lambda h=h: nv.nvmlDeviceGetMemoryInfo(h).used)
            r(rows, now_ns, f"{d}.temperature_c", lambda h=h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        return rows

    def close(self) -> None:
        if self._started:
            try:
                self._nv.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down a library that is going away
                pass
            self._started = False
