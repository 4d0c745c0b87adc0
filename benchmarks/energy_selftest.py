"""Energy self-test: does the GPU energy the harness reports hold up on this host?

On a host with an NVIDIA GPU: a few seconds idle, a few seconds of torch matrix multiplies,
a short idle tail (so the lag of NVML's averaged power reading settles inside the window),
sampled by the harness's own collector.  It prints, for the whole window and each phase:
the energy from NVML's total-energy counter, from integrating the sampled power, and from
two direct counter reads at the window's edges, and checks that
  - counter and integrated power agree within 5 % over the window, and
  - the collector's window energy (metrics.energy.energy_summary) matches the direct reads
    within 1 %.
Exit status 1 when a check fails.

Without a GPU it says so, checks what it can (the host sources, the energy block's
unavailable reason, RAPL where readable) and exits 0.

    python benchmarks/energy_selftest.py [--gpu 0] [--idle-s 4] [--load-s 6] [--tail-s 3] [--interval-s 0.1]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omegaconf import OmegaConf

from conf.schema import Telemetry as TelemetrySchema
from metrics.energy import energy_summary, power_energy, source_energy
from metrics.telemetry.collector import TelemetryCollector
from metrics.telemetry.index import TelemetryIndex
from metrics.telemetry.nvml import NvmlSampler
from metrics.telemetry.sources import build_samplers

COUNTER_VS_POWER_TOL = 0.05
COLLECTOR_VS_DIRECT_TOL = 0.01


def measure(nvml, gpu: int, load, idle_s: float, load_s: float, tail_s: float, interval_s: float) -> dict:
    """Idle, load, idle tail under the collector; figures for the window and each phase.

    ``nvml`` is the pynvml module (a fake in tests); ``load(seconds)`` keeps the GPU busy.
    """
    sampler = NvmlSampler(devices=[gpu], nvml=nvml)
    col = TelemetryCollector(None, [sampler], interval_s)
    if "nvml" in col.unavailable:
        raise RuntimeError(col.unavailable["nvml"])
    handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
    col.start()
    try:
        t0 = col.sample_now()
        direct0 = nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3
        col.mark("idle_baseline_start", t0)
        time.sleep(idle_s)
        t1 = col.mark("idle_baseline_end", col.sample_now())
        load(load_s)
        t2 = col.sample_now()
        time.sleep(tail_s)
        direct1 = nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3
        t3 = col.sample_now()
    finally:
        col.stop()
    table = col.table()
    tel = TelemetryIndex(table)
    power = tel.series["nvml"][f"gpu{gpu}"]["power_w"]
    phases = {"idle": (t0, t1), "load": (t1, t2), "tail": (t2, t3), "window": (t0, t3)}
    out = {"phases": {}}
    for name, (a, b) in phases.items():
        e = source_energy(tel, "nvml", a, b)
        out["phases"][name] = {"seconds": (b - a) / 1e9, "counter_j": e["energy_j"],
                               "method": e["methods"].get(f"gpu{gpu}"),
                               "power_integrated_j": power_energy(*power, a, b)["energy_j"]}
    block = energy_summary(table, t0, t3, good_tokens=1, all_tokens=1)
    out["collector_window_j"] = block["energy_j"]
    out["collector_idle_power_w"] = block["idle_power_w"]
    out["direct_j"] = direct1 - direct0
    out["samples"] = int(len(power[0]))
    w = out["phases"]["window"]
    out["counter_vs_power"] = abs(w["power_integrated_j"] - w["counter_j"]) / w["counter_j"]
    out["collector_vs_direct"] = abs(out["collector_window_j"] - out["direct_j"]) / out["direct_j"]
    out["ok"] = (w["method"] == "counter" and out["counter_vs_power"] <= COUNTER_VS_POWER_TOL
                 and out["collector_vs_direct"] <= COLLECTOR_VS_DIRECT_TOL)
    return out


def torch_load(gpu: int):
    import torch

    dev = torch.device(f"cuda:{gpu}")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
    torch.cuda.synchronize(dev)

    def load(seconds: float) -> None:
        end = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < end:
            for _ in range(8):
                a @ b
            torch.cuda.synchronize(dev)
            n += 8
        print(f"  load: {n} matmuls of 8192x8192 fp16 ({n * 2 * 8192 ** 3 / seconds / 1e12:.0f} TFLOP/s)")

    return load


def print_gpu(r: dict) -> None:
    print(f"{'phase':8} {'s':>6} {'counter J':>11} {'power-int J':>12} {'diff':>7} {'mean W':>8}")
    for name, p in r["phases"].items():
        diff = (p["power_integrated_j"] - p["counter_j"]) / p["counter_j"] if p["counter_j"] else math.nan
        print(f"{name:8} {p['seconds']:6.2f} {p['counter_j']:11.1f} {p['power_integrated_j']:12.1f} {diff:+7.1%} "
              f"{p['counter_j'] / p['seconds']:8.1f}")
    print(f"power samples: {r['samples']}; idle baseline {r['collector_idle_power_w']:.1f} W")
    print(f"counter vs integrated power over the window: {r['counter_vs_power']:.2%} "
          f"(limit {COUNTER_VS_POWER_TOL:.0%})")
    print(f"collector window energy {r['collector_window_j']:.1f} J vs direct counter reads {r['direct_j']:.1f} J: "
          f"{r['collector_vs_direct']:.3%} (limit {COLLECTOR_VS_DIRECT_TOL:.0%})")
    print("idle/tail phases differ more than the window: NVML's power reading is a ~1 s average, "
          "so it lags the load's edges; the lag cancels once the window holds the tail.")


def no_gpu(reason: str) -> int:
    print(f"NO NVIDIA GPU PRESENT: {reason}")
    print("GPU checks skipped; checking what this host has instead.")
    tcfg = OmegaConf.merge(OmegaConf.structured(TelemetrySchema), {"nvml": {"enabled": False}})
    col = TelemetryCollector(None, build_samplers(tcfg), 0.1).start()
    a = col.sample_now()
    time.sleep(1.0)
    b = col.sample_now()
    col.stop()
    table = col.table()
    host = [r for r in table.to_pylist() if r["source"] == "host"]
    cores = {r["name"] for r in host if r["name"].startswith("cpu_percent.core")}
    print(f"host: {len(host)} samples in 1 s ({len(cores)} cores, memory, network and disk bytes)")
    for src, why in col.unavailable.items():
        print(f"{src}: unavailable: {why}")
    blk = energy_summary(table, a, b, 1, 1)
    if blk["energy_available"]:
        print(f"energy block filled from {blk['energy_source']} ({blk['energy_scope']}): "
              f"{blk['energy_j']:.2f} J in {(b - a) / 1e9:.2f} s = {blk['mean_power_w']:.1f} W")
    else:
        print(f"energy block: unavailable: {blk['energy_unavailable_reason']}")
    ok = bool(cores) and (blk["energy_available"] or bool(blk["energy_unavailable_reason"]))
    print("host checks:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--idle-s", type=float, default=4.0)
    ap.add_argument("--load-s", type=float, default=6.0)
    ap.add_argument("--tail-s", type=float, default=3.0)
    ap.add_argument("--interval-s", type=float, default=0.1)
    args = ap.parse_args(argv)
    probe = NvmlSampler(devices=[args.gpu])
    ok, why = probe.available()
    if not ok:
        return no_gpu(why)
    nv = probe._nv
    name = nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(args.gpu))
    print(f"GPU {args.gpu}: {name.decode() if isinstance(name, bytes) else name}; "
          f"driver {nv.nvmlSystemGetDriverVersion()}")
    try:
        load = torch_load(args.gpu)
        r = measure(nv, args.gpu, load, args.idle_s, args.load_s, args.tail_s, args.interval_s)
    except RuntimeError as e:
        print(f"GPU present but not measurable: {e}")
        return 1
    print_gpu(r)
    print("RESULT:", "PASS" if r["ok"] else "FAIL")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
