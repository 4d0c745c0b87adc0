"""Background telemetry: samplers that run on their own thread, off the load generator's loop.

Each sampler returns rows ``(time_ns, source, name, value, detail)``; the collector keeps
them and writes ``telemetry.parquet``.  ``time_ns`` is ``time.perf_counter_ns()``, the clock
of ``requests.parquet``.  Names are ``<device>.<quantity>_<unit>`` (``gpu0.power_w``,
``gpu0.energy_counter_j``, ``package-0.energy_counter_j``, ``cpu_percent.core3``).

A source that cannot be read on this host is recorded once as unavailable with the reason
(``name = 'unavailable'``, ``value`` NaN, reason in ``detail``); one quantity a device does
not support is recorded once as ``name`` with NaN and ``detail = 'unavailable: why'``.
Never zeros: a zero would read as a measurement.

Sources: NVML (``nvidia-ml-py``; the per-GPU total-energy counter is the primary energy
source), a DCGM exporter's Prometheus page, RAPL package energy (``/sys/class/powercap``),
and the host via ``psutil``.  Marks (``source = 'mark'``) put events such as the idle
baseline on the same clock.
"""

from __future__ import annotations

import importlib
import math
import os
import re
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

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


class _OnceFailures:
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


# ---------------------------------------------------------------------------------------------
class HostSampler(Sampler):
    """CPU per core, memory, network and disk bytes, and the CPU/RSS of watched processes (psutil)."""

    source = "host"

    def __init__(self, pids: dict[str, int] | None = None):
        import psutil

        self.psutil = psutil
        self.procs = {}
        self._lock = threading.Lock()
        for label, pid in (pids or {}).items():
            self.watch_process(label, pid)
        psutil.cpu_percent(None, percpu=True)

    def watch_process(self, label: str, pid: int) -> None:
        try:
            p = self.psutil.Process(pid)
            p.cpu_percent(None)
        except self.psutil.Error:
            return
        with self._lock:
            self.procs[label] = p

    def sample(self, now_ns: int) -> list[tuple]:
        ps = self.psutil
        rows = [(now_ns, "host", f"cpu_percent.core{i}", float(v), None)
                for i, v in enumerate(ps.cpu_percent(None, percpu=True))]
        vm = ps.virtual_memory()
        rows.append((now_ns, "host", "mem_used_bytes", float(vm.total - vm.available), None))
        net = ps.net_io_counters()
        if net is not None:
            rows.append((now_ns, "host", "net_sent_bytes", float(net.bytes_sent), None))
            rows.append((now_ns, "host", "net_recv_bytes", float(net.bytes_recv), None))
        disk = ps.disk_io_counters()
        if disk is not None:
            rows.append((now_ns, "host", "disk_read_bytes", float(disk.read_bytes), None))
            rows.append((now_ns, "host", "disk_write_bytes", float(disk.write_bytes), None))
        with self._lock:
            procs = list(self.procs.items())
        for label, p in procs:
            try:
                if p.status() == ps.STATUS_ZOMBIE:  # exited, not yet reaped: its zeros are not a reading
                    continue
                cpu = p.cpu_percent(None)
                rss = p.memory_info().rss
                for child in p.children(recursive=True):
                    try:
                        rss += child.memory_info().rss
                    except ps.Error:
                        pass
                rows.append((now_ns, label, "cpu_percent", float(cpu), None))
                rows.append((now_ns, label, "rss_bytes", float(rss), None))
            except ps.Error:
                pass
        return rows


# ---------------------------------------------------------------------------------------------
class NvmlSampler(Sampler):
    """Per GPU: total-energy counter (mJ since driver load -> J), power, SM/memory clocks,
    utilisation, memory used, temperature.  ``nvml`` lets tests pass a fake module."""

    source = "nvml"
    measures_energy = True

    def __init__(self, devices: list[int] | None = None, nvml=None):
        self._nv = nvml
        self.devices = devices
        self.handles: dict[int, object] = {}
        self._fail = _OnceFailures(self.source)
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
            r(rows, now_ns, f"{d}.energy_counter_j", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h), 1e-3)
            r(rows, now_ns, f"{d}.power_w", lambda: nv.nvmlDeviceGetPowerUsage(h), 1e-3)
            r(rows, now_ns, f"{d}.sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
            r(rows, now_ns, f"{d}.mem_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
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
            r(rows, now_ns, f"{d}.mem_used_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(h).used)
            r(rows, now_ns, f"{d}.temperature_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        return rows

    def close(self) -> None:
        if self._started:
            try:
                self._nv.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down a library that is going away
                pass
            self._started = False


# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
def build_samplers(tcfg, pids: dict[str, int] | None = None) -> list[Sampler]:
    """The samplers ``telemetry.*`` asks for (see conf/config.yaml)."""
    tcfg = tcfg or {}
    out: list[Sampler] = [HostSampler(pids)]
    nv = tcfg.get("nvml") or {}
    if nv.get("enabled", True):
        devices = nv.get("devices")
        out.append(NvmlSampler(list(devices) if devices is not None else None))
    dc = tcfg.get("dcgm") or {}
    out.append(DcgmSampler(dc.get("url"), float(dc.get("timeout_s") or 2.0)))
    rp = tcfg.get("rapl") or {}
    if rp.get("enabled", True):
        out.append(RaplSampler(rp.get("root") or "/sys/class/powercap"))
    return out


def _table(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows)) if rows else [[], [], [], [], []]
    return pa.table({n: list(c) for n, c in zip(SCHEMA.names, cols)}, schema=SCHEMA)


def write_table(path: str | os.PathLike, rows: list[tuple]) -> str:
    path = os.fspath(path)
    tmp = path + ".partial"
    pq.write_table(_table(rows), tmp)
    os.replace(tmp, path)
    return path


def _needed(rows: list[tuple], intervals: list[tuple[int, int]]) -> set[int]:
    """Indices of the rows that windows over ``intervals`` need (see ``window_rows``)."""
    keep = set()
    for a, b in intervals:
        before: dict = {}
        after: dict = {}
        for i, r in enumerate(rows):
            key = (r[1], r[2])
            if r[1] == MARK:  # events: only those inside an interval
                if a <= r[0] <= b:
                    keep.add(i)
                continue
            if r[0] < a:
                before[key] = i
            elif r[0] > b:
                after.setdefault(key, i)
            else:
                keep.add(i)
        keep.update(before.values())
        keep.update(after.values())
    for i, r in enumerate(rows):
        if r[2] in (UNAVAILABLE, "sample_error") or (r[4] or "").startswith(UNAVAILABLE):
            keep.add(i)
    return keep


class TelemetryCollector:
    """Runs samplers every ``interval_s`` on a daemon thread.

    Either one collector per run (``stop()`` writes ``path``), or one per experiment that
    outlives several windows: ``sample_now()`` at each window edge, then
    ``write_window(path, start, end)`` writes the rows a window needs.
    """

    def __init__(self, path: str | os.PathLike | None, samplers: list[Sampler], interval_s: float = 0.5):
        self.path = os.fspath(path) if path is not None else None
        self.samplers: list[Sampler] = []
        self.rows: list[tuple] = []
        self.unavailable: dict[str, str] = {}
        self._lock = threading.Lock()
        now = time.perf_counter_ns()
        for s in samplers:
            try:
                ok, why = s.available()
            except Exception as e:  # noqa: BLE001 - a probe that crashes is an unavailable source
                ok, why = False, f"{type(e).__name__}: {e}"
            if ok:
                self.samplers.append(s)
            else:
                self.unavailable[s.source] = why
                self.rows.append((now, s.source, UNAVAILABLE, math.nan, why))
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)

    @property
    def measures_energy(self) -> bool:
        return any(s.measures_energy for s in self.samplers)

    def start(self) -> "TelemetryCollector":
        self._thread.start()
        return self

    def sample_now(self) -> int:
        """Take one sample of every source now (a window edge); returns its time."""
        with self._lock:
            now = time.perf_counter_ns()
            for s in self.samplers:
                try:
                    self.rows.extend(s.sample(now))
                except Exception as e:  # noqa: BLE001 - a flaky source must not stop the run
                    self.rows.append((now, s.source, "sample_error", math.nan, f"{type(e).__name__}: {e}"))
        return now

    def add_sampler(self, s: Sampler) -> bool:
        """Add a source once it can be read (an engine's metrics page after the engine is up)."""
        try:
            ok, why = s.available()
        except Exception as e:  # noqa: BLE001 - a probe that crashes is an unavailable source
            ok, why = False, f"{type(e).__name__}: {e}"
        with self._lock:
            if ok:
                self.samplers.append(s)
            else:
                self.unavailable[s.source] = why
                self.rows.append((time.perf_counter_ns(), s.source, UNAVAILABLE, math.nan, why))
        return ok

    def remove_sampler(self, s: Sampler) -> None:
        """Stop sampling a source (an engine about to be stopped on purpose)."""
        with self._lock:
            if s in self.samplers:
                self.samplers.remove(s)

    def record(self, rows: list[tuple]) -> None:
        """Rows taken outside the timer (exact snapshots at a run's edges)."""
        with self._lock:
            self.rows.extend(rows)

    def mark(self, name: str, t_ns: int | None = None, detail: str | None = None) -> int:
        t = time.perf_counter_ns() if t_ns is None else int(t_ns)
        with self._lock:
            self.rows.append((t, MARK, name, math.nan, detail))
        return t

    def watch_process(self, label: str, pid: int) -> None:
        for s in self.samplers:
            if isinstance(s, HostSampler):
                s.watch_process(label, pid)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample_now()
            self._stop.wait(self.interval_s)

    def window_rows(self, start_ns: int, end_ns: int, also: list[tuple[int, int]] = ()) -> list[tuple]:
        """Rows inside [start, end] and the ``also`` intervals (marks included), the last sample
        of each series before each interval and the first after it (so edges can be
        interpolated), and every unavailable/failure row."""
        with self._lock:
            rows = list(self.rows)
        return [rows[i] for i in sorted(_needed(rows, [(start_ns, end_ns), *also]), key=lambda i: (rows[i][0], i))]

    def forget_before(self, t_ns: int, keep: list[tuple[int, int]] = ()) -> int:
        """Drop the rows no window from ``t_ns`` on can need, so an experiment's telemetry
        stays the size of one window (plus ``keep``, e.g. the idle baseline every window
        reuses) however long it runs.  Kept: rows from ``t_ns`` on, the last sample of each
        series before it, the ``keep`` intervals with their edges, unavailable/failure rows.
        Returns how many rows were dropped."""
        with self._lock:
            rows = self.rows
            needed = _needed(rows, [(t_ns, 1 << 62), *keep])
            self.rows = [r for i, r in enumerate(rows) if i in needed]
            return len(rows) - len(self.rows)

    def write_window(self, path: str | os.PathLike, start_ns: int, end_ns: int,
                     also: list[tuple[int, int]] = ()) -> str:
        return write_table(path, self.window_rows(start_ns, end_ns, also))

    def table(self) -> pa.Table:
        with self._lock:
            return _table(list(self.rows))

    def stop(self) -> str | None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for s in self.samplers:
            s.close()
        if self.path is None:
            return None
        with self._lock:
            return write_table(self.path, self.rows)
