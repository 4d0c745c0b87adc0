"""Measure this host's roofline rates for ``conf/hardware/cpu_host.yaml``: achieved matmul
FLOP/s per precision, achieved memory bandwidth, and memory size.

    python benchmarks/cpu_host_profile.py [--n 2048] [--mib 1024] [--seconds 3]

Figures (each the best of repeated timings over ``--seconds``, all threads torch uses):

- matmul: ``torch.matmul`` of two n x n matrices; FLOP/s = 2 n^3 / time (one multiply and
  one add per inner-product term), in fp32 and bf16 (oneDNN uses AVX-512 BF16 where the
  CPU has it).
- copy bandwidth: ``dst.copy_(src)`` of a ``--mib`` MiB tensor (far larger than the caches),
  bytes = 2 x size (read src + write dst; the write-allocate read is not counted, as in
  STREAM's Copy); also a single-threaded ``numpy.copyto`` for comparison.
- memory_gb: MemTotal of /proc/meminfo, in GB (1e9 bytes).

These are achieved rates, not datasheet peaks: a roofline on them is what this host's
libraries reach, so a bound from them is tight but can be beaten by a better kernel.
"""

from __future__ import annotations

import argparse
import os
import platform
import time


def best_seconds(fn, seconds: float) -> float:
    """The fastest of repeated calls of ``fn`` within ``seconds`` (after one warm-up call)."""
    fn()
    best, t_end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_tflops(n: int, dtype, seconds: float) -> float:
    """2 n^3 / best time of ``a @ b`` (n x n), in TFLOP/s."""
    import torch

    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    out = torch.empty(n, n, dtype=dtype)
    t = best_seconds(lambda: torch.matmul(a, b, out=out), seconds)
    return 2 * n ** 3 / t / 1e12


def torch_copy_gbs(mib: int, seconds: float) -> float:
    """2 x bytes / best time of ``dst.copy_(src)`` (fp32 tensors of ``mib`` MiB), in GB/s."""
    import torch

    n = mib * 2 ** 20 // 4
    src, dst = torch.ones(n), torch.zeros(n)
    t = best_seconds(lambda: dst.copy_(src), seconds)
    return 2 * n * 4 / t / 1e9


def numpy_copy_gbs(mib: int, seconds: float) -> float:
    """2 x bytes / best time of ``numpy.copyto(dst, src)`` (one thread), in GB/s."""
    import numpy as np

    n = mib * 2 ** 20 // 8
    src, dst = np.ones(n), np.zeros(n)
    t = best_seconds(lambda: np.copyto(dst, src), seconds)
    return 2 * n * 8 / t / 1e9


def mem_total_gb(path: str = "/proc/meminfo") -> float:
    """MemTotal (kB = 1024 bytes in /proc/meminfo) in GB of 1e9 bytes."""
    with open(path) as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / 1e9
    raise ValueError(f"{path}: no MemTotal line")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2048, help="matrix size")
    ap.add_argument("--mib", type=int, default=1024, help="copy size per array")
    ap.add_argument("--seconds", type=float, default=3.0, help="timing budget per figure")
    a = ap.parse_args()

    import torch

    print(f"host: {cpu_model()}, {os.cpu_count()} logical CPUs, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), {time.strftime('%Y-%m-%d')}")
    print(f"matmul fp32   {matmul_tflops(a.n, torch.float32, a.seconds) * 1e3:8.1f} GFLOP/s  (n={a.n})")
    print(f"matmul bf16   {matmul_tflops(a.n, torch.bfloat16, a.seconds) * 1e3:8.1f} GFLOP/s  (n={a.n})")
    print(f"copy torch    {torch_copy_gbs(a.mib, a.seconds):8.1f} GB/s     ({a.mib} MiB, read + write)")
    print(f"copy numpy    {numpy_copy_gbs(a.mib, a.seconds):8.1f} GB/s     ({a.mib} MiB, one thread)")
    print(f"memory_gb     {mem_total_gb():8.1f} GB       (MemTotal)")


if __name__ == "__main__":
    main()
