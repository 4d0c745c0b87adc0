"""A fake ``pynvml`` module for tests: GPUs whose power is fixed and whose energy counter is
the exact integral of that power on ``time.perf_counter_ns()``, so a test knows the truth."""

import time
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    def __str__(self):
        return "Not Supported"


class NVMLError_LibraryNotFound(NVMLError):
    def __str__(self):
        return "NVML Shared Library Not Found"


class FakeNvml:
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, powers_w=(300.0, 150.0), counter_supported=(True, False), init_error=None):
        self.powers_w = list(powers_w)
        self.counter_supported = list(counter_supported)
        self.init_error = init_error
        self.t0 = time.perf_counter_ns()
        self.offset_mj = [123_456_789, 42_000_000][: len(powers_w)] + [0] * max(0, len(powers_w) - 2)
        self.calls = {"init": 0, "shutdown": 0}

    def nvmlInit(self):
        self.calls["init"] += 1
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.calls["shutdown"] += 1

    def nvmlDeviceGetCount(self):
        return len(self.powers_w)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def energy_true_j(self, i, t_ns):
        return self.powers_w[i] * (t_ns - self.t0) / 1e9

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.counter_supported[h]:
            raise NVMLError_NotSupported()
        return int(self.offset_mj[h] + self.energy_true_j(h, time.perf_counter_ns()) * 1000)

    def nvmlDeviceGetPowerUsage(self, h):
        return int(self.powers_w[h] * 1000)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=97, memory=41)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=70 * 2**30, total=80 * 2**30, free=10 * 2**30)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 61
