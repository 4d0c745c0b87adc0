"""A synthetic experiment in the real on-disk layout, for the report's tests and
``benchmarks/report_scale.py``: no engine runs, latencies are drawn from a simple model per
config, and everything downstream of the request records is the harness's own code.

Each run folder (``<root>/<config>/block<b>/<label>/``) holds ``requests.parquet`` in
``loadgen.records.SCHEMA`` (chunk lists included), ``summary.json`` from
``metrics.summary.summarize`` (cost from a rental profile, energy from a synthetic NVML power
series), ``telemetry.parquet`` (engine queue and KV usage, GPU power and energy counter),
``run.json``, ``provenance.json`` and ``workload.json`` (``loadgen.workloads.characterise``).
The root gets ``runs.parquet`` (``harness.experiment_record``), ``experiment.json``,
``comparison.json`` (``metrics.comparison.compare_runs``, with a "max load under the SLO"
point) and, for an ablation, ``ablation.json`` (``metrics.ablation``).

The model: offered rate r against a config's capacity c (requests/s), rho = r / c; TTFT =
ttft_ms x (1 + 3 rho^2) x lognormal(0, 0.3); TPOT = tpot_ms x (1 + rho) x lognormal(0, 0.15);
each token's gap is TPOT x Gamma(4)/4; one token per chunk; a share 0.002 (1 + rho) of
requests are rejected with HTTP 503.  Block b scales every latency by 1 + 0.02 b (a drifting
host), so intervals over blocks are not zero-width.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness import experiment_record, results_io
from loadgen.records import SCHEMA
from loadgen.workloads.characterise import characterise
from loadgen.workloads.table import WorkloadTable
from metrics.slo import SLO, good_mask
from metrics.summary import summarize
from metrics.telemetry.base import SCHEMA as TELEMETRY_SCHEMA

NS = 1_000_000_000
COST = {"model": "rental", "currency": "USD", "num_gpus": 1, "hourly_per_gpu": 2.5, "num_hosts": 0,
        "hourly_per_host": 0.0, "extra_hourly": {}}
DEFAULT_CONFIGS = {"fast": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0, "power_w": 450.0},
                   "slow": {"ttft_ms": 90.0, "tpot_ms": 14.0, "capacity": 25.0, "power_w": 400.0}}
DEFAULT_SLO = {"ttft_ms": 400.0, "tpot_ms": 40.0, "e2el_ms": None, "percentile": 99.0, "min_attainment": None}


def _requests(rng, n: int, rate: float, p: dict, drift: float, t0_ns: int, output_tokens: int, slo: SLO,
              warmup: int = 2) -> pa.Table:
    rho = rate / p["capacity"]
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    sched = t0_ns + np.round(arrivals * NS).astype(np.int64)
    sent = sched + rng.integers(5_000, 60_000, n)                         # 5-60 us of client lag
    fail = rng.random(n) < 0.002 * (1 + rho)
    ttft_s = p["ttft_ms"] * drift * (1 + 3 * rho ** 2) * rng.lognormal(0, 0.3, n) / 1e3
    tpot_s = p["tpot_ms"] * drift * (1 + rho) * rng.lognormal(0, 0.15, n) / 1e3
    toks = np.where(fail, 0, np.maximum(1, np.round(output_tokens * rng.lognormal(0, 0.25, n)).astype(np.int64)))
    if p.get("long_share"):  # a few long generations: most of the tokens in a few requests
        toks = np.where(rng.random(n) < p["long_share"], toks * 40, toks)
    total = int(toks.sum())
    gaps = rng.gamma(4.0, 0.25, total) * np.repeat(tpot_s, toks)           # per token, mean tpot
    starts = np.concatenate([[0], np.cumsum(toks)[:-1]])
    first = np.where(fail, 0, sent + np.round(ttft_s * NS).astype(np.int64))
    gaps[starts[toks > 0]] = 0.0                                          # the first chunk comes at TTFT
    cum = np.cumsum(gaps)
    seg = np.repeat(cum[starts[toks > 0]] if total else np.empty(0), toks[toks > 0])
    chunk_ns = np.repeat(first, toks) + np.round((cum - seg) * NS).astype(np.int64)
    ends = np.where(toks > 0, chunk_ns[np.maximum(starts + toks - 1, 0)] if total else 0, sent + 3_000_000)
    done = ends + 200_000
    ok = ~fail
    ttft = np.where(ok, (first - sent) / NS, np.nan)
    e2el = np.where(ok, (ends - sent) / NS, np.nan)
    tpot = np.where(ok & (toks > 1), (e2el - ttft) / np.maximum(toks - 1, 1), np.nan)
    status = np.where(ok, "ok", "http_error")
    offsets = pa.array(np.concatenate([[0], np.cumsum(toks)]).astype(np.int32))
    good = good_mask(slo, status, ttft, tpot, e2el)
    cols = {
        "request_id": pa.array([f"r{i}" for i in range(n)]), "response_id": pa.array([f"cmpl-{i}" for i in range(n)]),
        "session_id": pa.nulls(n, pa.string()), "turn": pa.array(np.zeros(n, np.int32)),
        "scheduled_ns": pa.array(sched), "slot_ns": pa.array(sched), "sent_ns": pa.array(sent),
        "first_token_ns": pa.array(first, mask=fail), "end_ns": pa.array(ends, mask=fail), "done_ns": pa.array(done),
        "chunk_ns": pa.ListArray.from_arrays(offsets, pa.array(chunk_ns, pa.int64())),
        "chunk_tokens": pa.ListArray.from_arrays(offsets, pa.array(np.ones(total, np.int32))),
        "prompt_tokens": pa.array(np.full(n, 256)), "expected_prompt_tokens": pa.array(np.full(n, 256)),
        "max_tokens": pa.array(np.full(n, 4 * output_tokens)), "output_tokens": pa.array(toks, mask=fail),
        "tokens_source": pa.array(["usage"] * n), "status": pa.array(status),
        "http_status": pa.array(np.where(fail, 503, 200).astype(np.int32)),
        "error": pa.array(np.where(fail, "Service Unavailable", None).tolist(), pa.string()),
        "finish_reason": pa.array(np.where(fail, None, "length").tolist(), pa.string()),
        "ttft_s": pa.array(ttft), "tpot_s": pa.array(tpot), "e2el_s": pa.array(e2el),
        "connect_s": pa.nulls(n, pa.float64()), "slo_ok": pa.array(good),
        "warmup": pa.array(np.arange(n) < warmup),
    }
    # columns this model does not draw (added to the schema later): null, as an old writer leaves them
    return pa.table([cols[c].cast(SCHEMA.field(c).type) if c in cols else pa.nulls(n, SCHEMA.field(c).type)
                     for c in SCHEMA.names], schema=SCHEMA)


def _telemetry(t: pa.Table, start: int, end: int, p: dict, rho: float) -> pa.Table:
    """Engine queue and KV usage every 0.5 s, GPU power and its energy counter every 0.1 s."""
    sent = np.sort(t.column("sent_ns").to_numpy())
    done = np.sort(t.column("done_ns").to_numpy())
    rows = []
    for ts in range(start, end, NS // 2):
        running = int(np.searchsorted(sent, ts) - np.searchsorted(done, ts))
        rows += [(ts, "engine", "running", float(running), "vllm:num_requests_running"),
                 (ts, "engine", "waiting", float(max(0.0, running - 32)), "vllm:num_requests_waiting"),
                 (ts, "engine", "kv_cache_usage", min(1.0, running / 64), "vllm:kv_cache_usage_perc")]
    energy = 0.0
    step = NS // 10
    for ts in range(start, end, step):
        watts = 120.0 + (p["power_w"] - 120.0) * min(1.0, rho)
        rows += [(ts, "nvml", "gpu0.power_w", watts, None), (ts, "nvml", "gpu0.energy_counter_j", 1e6 + energy, None)]
        energy += watts * step / NS
    cols = list(zip(*rows))
    return pa.table({n: list(c) for n, c in zip(TELEMETRY_SCHEMA.names, cols)}, schema=TELEMETRY_SCHEMA)


def _run(out: Path, config: str, block: int, index: int, rate: float, p: dict, requests: int, output_tokens: int,
         slo_cfg: dict, seed: int, config_index: int, model: str) -> dict:
    rng = np.random.default_rng([seed, config_index, block, index])
    slo = SLO(**{k: slo_cfg[k] for k in ("ttft_ms", "tpot_ms", "e2el_ms", "percentile")})
    t0 = (1_000 + 3_600 * (block * 100 + config_index * 10 + index)) * NS
    table = _requests(rng, requests, rate, p, 1 + 0.02 * block, t0, output_tokens, slo)
    start = t0 - NS
    end = int(table.column("done_ns").to_numpy().max()) + NS // 2
    tel = _telemetry(table, start, end, p, rate / p["capacity"])
    summary = summarize(table, slo, start, end, cost_cfg=COST, telemetry=tel, steady_capacity=3,
                        cost_replicas=int(p.get("replicas", 1)))
    label = f"poisson rate={rate:g}"
    summary.update({"label": label, "offered_load": rate, "load_kind": "poisson", "client_cpu_s": 0.4,
                    "client_cpu_util": 0.05 + 0.01 * index, "chunk_timestamps": "kernel", "saturated": False})
    folder = re.sub(r"[^A-Za-z0-9._+=-]+", "_", config)  # a name may hold any text; its folder may not
    d = out / folder / f"block{block}" / f"{index:02d}-rate{rate:g}" if config else out / f"{index:02d}-rate{rate:g}"
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, d / "requests.parquet", compression="zstd")
    pq.write_table(tel, d / "telemetry.parquet", compression="zstd")
    load = {"kind": "poisson", "rate": rate, "concurrency": None, "burstiness": 1.0, "num_requests": requests,
            "warmup_requests": 2, "seed": 0}
    fixed = {"model": model, "model_revision": None, "tokenizer_sha256": "ab" * 32, "weight_dtype": "bfloat16",
             "kv_cache_dtype": "auto", "quantization": "none", "sampling": {"api": "completions"},
             "workload": {"name": "synthetic", "input_tokens": 256, "output_tokens": output_tokens},
             "slo": slo_cfg}
    results_io.write_json(d / "run.json", {"index": index, "label": label, "load": load, "repeat": 0,
                                           "config": config, "block": block, "role": "point",
                                           "window_start_ns": start, "window_end_ns": end,
                                           "fixed_conditions": fixed})
    results_io.write_json(d / "provenance.json", {
        "harness": {"name": "tokenfactory", "version": "0.1.0", "commit": "0123456789abcdef-synthetic"},
        "host": {"hostname": "synthetic", "platform": "Linux", "cpu_count": 16},
        "gpus": {"available": True, "devices": [{"name": "NVIDIA H100 80GB HBM3", "driver": "580.00"}]},
        "hardware": {"name": "h100"},
        "engine": {"engine": "vllm", "engine_version": "0.32.0", "model": model,
                   "command": ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                               "--max-num-seqs", str(int(p["capacity"]))],
                   "feature_flags": ["--max-num-seqs", str(int(p["capacity"]))]}})
    arr = np.asarray(table.column("scheduled_ns").to_numpy() - t0, dtype=float) / NS
    wt = WorkloadTable(arrival_s=arr, input_tokens=np.full(requests, 256, np.int64),
                       output_tokens=np.asarray(table.column("max_tokens").to_numpy() // 4, np.int64),
                       source="synthetic")
    results_io.write_json(d / "workload.json", {**characterise(wt), "workload": "synthetic"})
    results_io.write_json(d / "summary.json", summary)
    return summary


def write_experiment(out, *, configs: dict[str, dict] | None = None, rates=(5.0, 10.0, 20.0), blocks: int = 3,
                     requests: int = 200, output_tokens: int = 32, seed: int = 0, slo: dict | None = None,
                     ablation: dict[str, tuple[str, ...]] | None = None, model: str = "synthetic/model-7b") -> Path:
    """Write the experiment under ``out`` and return it.  ``configs``: name -> {ttft_ms, tpot_ms,
    capacity, power_w} and optionally ``replicas`` (the cost counts that many, default 1) and
    ``long_share`` (that share of requests generates 40 x the tokens); ``ablation``: arm name -> the
    optimisations it turns on (the arms must be ``configs``' names, the baseline's tuple empty) to
    write ``ablation.json`` too."""
    from omegaconf import OmegaConf

    from conf.schema import COMPARED_METRICS
    from metrics.comparison import compare_runs

    out = Path(out)
    configs = configs or DEFAULT_CONFIGS
    slo_cfg = {**DEFAULT_SLO, **(slo or {})}
    names = list(configs)
    order_rng = np.random.default_rng(seed)
    orders = []
    searches = []
    for b in range(blocks):
        order = list(order_rng.permutation(names))
        orders.append({"block": b, "order": [str(c) for c in order]})
        for c in order:
            ci = names.index(c)
            best = None
            for i, rate in enumerate(rates):
                s = _run(out, c, b, i, float(rate), configs[c], requests, output_tokens, slo_cfg, seed, ci, model)
                if all(s.get(k, True) for k in s if k.startswith("slo_") and k.endswith("_met")):
                    best = (rate, s)
            if best is not None:
                rate, s = best
                searches.append({"config": c, "block": b, "max_load_under_slo": float(rate),
                                 **{k: s.get(k) for k in ("goodput_rps", "good_output_throughput", "cost_per_mtok_good",
                                                          "cost_total", "good_output_tokens")}})
    rows = experiment_record.run_rows(out)
    table = experiment_record.runs_table(rows)
    pq.write_table(table, out / "runs.parquet")
    protocol = "ablation" if ablation else "compare"
    steps = [{"step": k, "ran": k in (1, 2, 3, 4, 6) or (k == 5 and bool(ablation)), "what": v,
              "how": "synthetic experiment (tests/synthetic_experiment.py)" if k != 7 else "not a promotion"}
             for k, v in experiment_record.STEPS.items()]
    record = {"experiment": out.name, "protocol": protocol, "status": "complete", "output_dir": str(out),
              "seed": seed, "base_overrides": [], "configs": {c: [f"engine.features.max_num_seqs="
                                                                  f"{int(configs[c]['capacity'])}"] for c in names},
              "baseline": names[0], "blocks": orders,
              "load_points": [{"label": f"poisson rate={r:g}", "load": {"kind": "poisson", "rate": r}} for r in rates],
              "runs_planned": len(rows), "runs_finished": len(rows), "convergence": "fixed repeats",
              "fixed_conditions": {c: {"model": model} for c in names}, "slo": slo_cfg,
              "workload": {"name": "synthetic"}, "steps": steps}
    results_io.write_json(out / "experiment.json", record)
    proto = OmegaConf.create({"name": protocol, "metrics": list(COMPARED_METRICS), "confidence": 0.95,
                              "min_effect": 0.02, "baseline": names[0]})
    results_io.write_json(out / "comparison.json", compare_runs(table, proto, record, searches, baseline=names[0]))
    if ablation:
        from metrics.ablation import bottlenecks, effects

        arms = [(name, tuple(opts)) for name, opts in ablation.items()]
        results_io.write_json(out / "ablation.json", {"arms": {n: list(o) for n, o in arms}, "confidence": 0.95,
                                                      "points": effects(table, arms), "bottlenecks": bottlenecks(
                                                          table, arms)})
    return out


def finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
