"""A replica as its engine schedules it: the requests the plan's router sent to each replica,
replayed through Dynamo's offline replay (the mocker's vLLM-style scheduler: continuous
batching, chunked prefill, KV blocks, prefix caching, preemption), timed by a profile in the
mocker's ``--planner-profile-data`` format (``perf_data.npz`` of ``tokenfactory profile``).

The harness's venv cannot import ``dynamo``: the replay runs in the Dynamo venv's Python
(``protocol.dynamo_python``, else ``$TOKENFACTORY_DYNAMO_PYTHON``, else the venv
``.ci/dynamo_venv.sh`` builds) as ``replay_worker.py``, one process per simulation, one
single-worker replay per replica.

- Trace (Mooncake jsonl, one line a request, in arrival order): ``timestamp`` = arrival in ms,
  ``input_length`` = prompt tokens, ``output_length`` = output tokens, ``hash_ids`` =
  ceil(prompt / block_size) ids of its own (the plan's traffic says nothing of shared
  prefixes, so no request reuses another's blocks).
- The profile's ``prefill_ttft_ms`` is a measured TTFT (``metrics.profile``: the first token
  included), but the mocker emits a request's first token at the end of the decode step after
  its prefill, so its TTFT is the table's plus one step.  The replay is given the table less
  that step (``first_token_table``: prefill_ttft_ms(L) - decode_itl(KV = L, context = L), the
  step of one sequence of L tokens, bilinear in the grid, clamped at its edges; floored at
  0), so that a request alone gets the profile's TTFT back.
- Back, per request: ``TTFT = ttft_ms / 1e3``; ``TPOT = (e2e_latency_ms - ttft_ms) / 1e3 /
  (output tokens - 1)`` (the harness's TPOT, ``metrics.request_metrics``); a request the
  replay did not complete has none (counted as failed).

The engine's knobs come from the candidate's runs' provenance (``engine_knobs``).  The
autoscaling policy and the router stay the plan's (``protocols.plan.fleet``): under
round-robin routing which replica serves a request depends on arrivals and the policy alone,
so the scheduler serves exactly the streams the policy produced; under least-loaded routing
the choice follows the processor-sharing model's counts in flight (an approximation the
plan states).  Replica start, drain and bill times stay the processor-sharing model's.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MODELS = ("auto", "scheduler", "processor_sharing")
WORKER = Path(__file__).with_name("replay_worker.py")
DEFAULT_PYTHON = Path.home() / ".cache" / "tokenfactory" / "dynamo-venv" / "bin" / "python"
PROFILE_NPZ = "perf_data.npz"

# the mocker's engine args, each with the names the harness's provenance records it under
# (vLLM's engine config, the features of a config, the mocker's own flags)
KNOBS = {
    "max_num_seqs": ("max_num_seqs",),
    "max_num_batched_tokens": ("max_num_batched_tokens", "max_batch_tokens"),
    "enable_chunked_prefill": ("enable_chunked_prefill", "chunked_prefill"),
    "enable_prefix_caching": ("enable_prefix_caching", "prefix_caching"),
    "block_size": ("block_size",),
    "num_gpu_blocks": ("num_gpu_blocks", "num_kv_blocks", "kv_cache_blocks"),
}


def engine_knobs(provenance: dict) -> dict:
    """The mocker's engine args found in a run's ``provenance.json`` (its ``engine`` part,
    nested mappings searched breadth first, the first name found of each knob's aliases;
    unset where none is recorded)."""
    out: dict = {}
    queue = [provenance.get("engine") or {}]
    while queue:
        node = queue.pop(0)
        for knob, names in KNOBS.items():
            for n in names:
                v = node.get(n)
                if knob not in out and v is not None and not isinstance(v, (dict, list)):
                    out[knob] = bool(v) if knob.startswith("enable_") else int(v)
        queue += [v for v in node.values() if isinstance(v, dict)]
    return out


def find_profile(path: str | os.PathLike | None) -> Path | None:
    """The mocker NPZ at ``path`` (the file, or a ``tokenfactory profile`` folder holding
    ``perf_data.npz``); None where there is none."""
    if not path:
        return None
    p = Path(path)
    if p.is_dir():
        p = p / PROFILE_NPZ
    return p if p.is_file() else None


def dynamo_python(given: str | None) -> Path | None:
    for c in (given, os.environ.get("TOKENFACTORY_DYNAMO_PYTHON"), DEFAULT_PYTHON):
        if c and Path(c).is_file():
            return Path(c)
    return None


def choose(mode: str, profile: Path | None, python: Path | None) -> tuple[str, str]:
    """(the replica model, why): ``scheduler`` where a profile and the Dynamo venv are at hand
    (``auto``) or asked for; else ``processor_sharing`` with the reason.  ``scheduler`` asked
    for without them is an error."""
    if mode not in MODELS:
        raise ValueError(f"protocol.replica_model={mode!r}: expected one of {', '.join(MODELS)}")
    if mode == "processor_sharing":
        return "processor_sharing", "protocol.replica_model=processor_sharing"
    missing = [w for w, ok in (("no profile (protocol.profile, or perf_data.npz in the candidate's experiment)",
                                profile is not None),
                               ("no Dynamo venv (protocol.dynamo_python, TOKENFACTORY_DYNAMO_PYTHON)",
                                python is not None)) if not ok]
    if not missing:
        return "scheduler", f"Dynamo's replay timed by {profile}"
    if mode == "scheduler":
        raise ValueError("protocol.replica_model=scheduler: " + "; ".join(missing))
    return "processor_sharing", "; ".join(missing)


def write_trace(path: Path, arrival_s, prompt_tokens, output_tokens, block_size: int = 16,
                hash_ids=None) -> None:
    """The requests as a Mooncake trace (module doc).  ``hash_ids``, where given, are each
    request's own block ids (ceil(prompt / block_size) of them: requests sharing a leading run
    share that prefix in the replay's cache); else every block is the request's own."""
    bs = max(int(block_size), 1)
    nxt = 0
    rows = zip(np.asarray(arrival_s, float), np.asarray(prompt_tokens), np.asarray(output_tokens))
    with open(path, "w", encoding="utf-8") as f:
        for i, (t, p, o) in enumerate(rows):
            p, o = max(int(p), 1), max(int(o), 1)
            nb = -(-p // bs)
            if hash_ids is not None:
                ids = [int(h) for h in hash_ids[i]]
                if len(ids) != nb:
                    raise ValueError(f"request {i}: {len(ids)} hash ids for {p} prompt tokens in blocks of {bs}")
            else:
                ids = list(range(nxt, nxt + nb))
                nxt += nb
            f.write(json.dumps({"timestamp": round(float(t) * 1e3, 3), "input_length": p, "output_length": o,
                                "hash_ids": ids}) + "\n")


def read_records(path: Path, arrival_s, prompt_tokens, output_tokens) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT s, TPOT s) of the trace's requests, in its order, from the replay's per-request
    records (module doc).  Records are matched to requests by (arrival, prompt, output) order
    (the replay's arrivals start at the first request's: the order is the same); requests
    that tie on all three are interchangeable."""
    prompt = np.maximum(np.asarray(prompt_tokens, dtype=np.int64), 1)
    out = np.maximum(np.asarray(output_tokens, dtype=np.int64), 1)
    n = prompt.size
    ttft, tpot = np.full(n, np.nan), np.full(n, np.nan)
    recs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    if len(recs) != n:
        raise ValueError(f"{path}: {len(recs)} records for {n} requests")
    recs.sort(key=lambda r: (r["arrival_time_ms"], r["input_length"], r["requested_output_length"]))
    order = np.lexsort((out, prompt, np.round(np.asarray(arrival_s, dtype=np.float64) * 1e3, 3)))
    for i, r in zip(order, recs):
        if r.get("terminal_status", "completed") != "completed" or r.get("ttft_ms") is None:
            continue
        ttft[i] = r["ttft_ms"] / 1e3
        k = int(out[i])
        if k > 1 and r.get("e2e_latency_ms") is not None:
            tpot[i] = (r["e2e_latency_ms"] - r["ttft_ms"]) / 1e3 / (k - 1)
    return ttft, tpot


def first_token_table(tables: dict) -> dict:
    """The mocker's arrays with ``prefill_ttft_ms`` less one decode step of a sequence of that
    prompt length (module doc)."""
    kv, ctx, itl = (np.asarray(tables[k], dtype=np.float64)
                    for k in ("decode_active_kv_tokens", "decode_context_length", "decode_itl"))
    isl = np.asarray(tables["prefill_isl"], dtype=np.float64)
    # decode_itl[i, j] is the step at kv[i], ctx[j]: along KV first, then along the context
    step = np.array([np.interp(x, ctx, [np.interp(x, kv, itl[:, j]) for j in range(ctx.size)]) for x in isl])
    out = {k: np.asarray(v) for k, v in tables.items()}
    out["prefill_ttft_ms"] = np.maximum(np.asarray(tables["prefill_ttft_ms"], dtype=np.float64) - step, 0.0)
    return out


@dataclass
class SchedulerModel:
    """What a replica is under the scheduler model: the profile, the engine's knobs, the
    Python that runs the replay."""
    python: Path
    profile: Path
    knobs: dict = field(default_factory=dict)
    timeout_s: float = 3600.0

    def engine_args(self, table: Path | None = None) -> dict:
        return {**self.knobs, "planner_profile_data": str(table or self.profile)}

    def describe(self) -> dict:
        return {"profile": str(self.profile), "engine_args": self.engine_args(), "python": str(self.python)}

    cache_dir: Path | None = None    # replays kept by their inputs' hash (None: a folder under the temp dir)

    def serve(self, streams: list[tuple]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each stream (arrival s, prompt tokens, output tokens[, each request's block ids];
        arrival order) replayed on one replica; its requests' (TTFT, TPOT), in its order (module doc).  The replay is
        deterministic: the same profile, knobs and streams (a block resample whose policy
        routed as the full plan's did) are replayed once and read back from the cache."""
        h = hashlib.sha256(json.dumps(self.engine_args(), sort_keys=True).encode())
        h.update(self.profile.read_bytes())
        for stream in streams:
            for a in stream[:3]:
                h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
            if len(stream) > 3:          # the requests' own block ids (prefix sharing)
                h.update(json.dumps([[int(x) for x in ids] for ids in stream[3]]).encode())
            h.update(b"|")
        folder = self.cache_dir or Path(tempfile.gettempdir()) / "tokenfactory-replay-cache"
        hit = folder / f"{h.hexdigest()}.npz"
        if hit.is_file():
            with np.load(hit) as z:
                return [(z[f"ttft{k}"], z[f"tpot{k}"]) for k in range(len(streams))]
        got = self._serve(streams)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = hit.with_suffix(f".{os.getpid()}.npz")
        np.savez(tmp, **{f"{w}{k}": g[i] for k, g in enumerate(got) for i, w in enumerate(("ttft", "tpot"))})
        os.replace(tmp, hit)
        return got

    def _serve(self, streams: list[tuple]) -> list[tuple[np.ndarray, np.ndarray]]:
        got: list = [None] * len(streams)
        with tempfile.TemporaryDirectory(prefix="tf-replay-") as tmp:
            jobs = []
            for k, stream in enumerate(streams):
                arr, pr, ou = stream[:3]
                if len(arr) == 0:
                    got[k] = (np.zeros(0), np.zeros(0))
                    continue
                tr, rep = Path(tmp) / f"trace{k}.jsonl", Path(tmp) / f"report{k}.jsonl"
                write_trace(tr, arr, pr, ou, self.knobs.get("block_size", 16),
                            stream[3] if len(stream) > 3 else None)
                jobs.append({"trace": str(tr), "report": str(rep), "num_workers": 1, "k": k})
            if jobs:
                table = Path(tmp) / "perf_data.npz"
                with np.load(self.profile) as z:
                    np.savez(table, **first_token_table({k: z[k] for k in z.files}))
                spec = Path(tmp) / "job.json"
                spec.write_text(json.dumps({"engine_args": self.engine_args(table), "jobs": jobs}), encoding="utf-8")
                env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
                env.setdefault("RUST_LOG", "warn")
                p = subprocess.run([str(self.python), str(WORKER), str(spec)], capture_output=True, text=True,
                                   env=env, timeout=self.timeout_s)
                if p.returncode != 0:
                    tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
                    raise RuntimeError(f"Dynamo's replay ({self.python}) failed, exit {p.returncode}: "
                                       + " | ".join(tail))
                for j in jobs:
                    arr, pr, ou = streams[j["k"]][:3]
                    got[j["k"]] = read_records(Path(j["report"]), arr, pr, ou)
        return got

