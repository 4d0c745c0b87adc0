"""The host: CPU per core, memory, network and disk bytes, and watched processes (psutil)."""

from __future__ import annotations

import threading

from metrics.telemetry.base import Sampler


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
