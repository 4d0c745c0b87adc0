"""What ran where: host, GPUs, Python, harness commit, engine facts."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def harness_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def gpus() -> dict:
    """GPUs seen through NVML, or why none were read."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "nvidia-ml-py is not installed", "devices": []}
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVMLError has many subclasses
        return {"available": False, "reason": f"NVML unavailable: {e}", "devices": []}
    try:
        devs = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            devs.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                         "memory_bytes": pynvml.nvmlDeviceGetMemoryInfo(h).total})
        drv = pynvml.nvmlSystemGetDriverVersion()
        return {"available": True, "driver": drv.decode() if isinstance(drv, bytes) else drv, "devices": devs}
    finally:
        pynvml.nvmlShutdown()


def host_info() -> dict:
    import psutil

    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "python": sys.version.split()[0],
        "nvidia_smi": shutil.which("nvidia-smi"),
    }


def collect(engine_prov: dict, hardware: dict | None = None) -> dict:
    """Everything a reader needs to know what ran: harness, host, GPUs seen, the engine's own
    account of itself, and the ``hardware`` profile the config named (conf/hardware/)."""
    from importlib import metadata

    try:
        version = metadata.version("tokenfactory")
    except metadata.PackageNotFoundError:
        version = None
    return {"harness": {"name": "tokenfactory", "version": version, "commit": harness_commit()},
            "host": host_info(), "gpus": gpus(), "hardware": hardware, "engine": engine_prov}
