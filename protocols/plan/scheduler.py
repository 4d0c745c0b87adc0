"""A replica as its engine schedules it: the requests the plan's router sent to each replica,
replayed through Dynamo's offline replay (the mocker's vLLM-style scheduler: continuous
batching, chunked prefill, KV blocks, prefix caching, preemption), timed by a profile in the
mocker's ``--planner-profile-data`` format (``perf_data.npz`` of ``tokenfactory profile``).

The harness's venv cannot import ``dynamo``: the replay runs in the Dynamo venv's Python
(``protocol.dynamo_python``, else ``$TOKENFACTORY_DYNAMO_PYTHON``, else the venv
``.ci/dynamo_venv.sh`` builds) as ``replay_worker.py --serve``: long-lived processes (``workers``,
one per core by default) each taking one replica's stream at a time, one single-worker replay
per replica; the venv's Python starts once per plan process, not once per simulation (with the
replay CLI's module it imported, that start cost twice the CPU of replaying 5,000 requests:
``benchmarks/plan_replay_profile.py``).  The records come back as an array
(``match_records``).

- Trace (Mooncake jsonl, one line a request, in arrival order): ``timestamp`` = arrival in ms,
  ``input_length`` = prompt tokens, ``output_length`` = output tokens, ``hash_ids`` =
  ceil(prompt / block_size) ids of its own (the plan's traffic says nothing of shared
  prefixes, so no request reuses another's blocks), or given with the stream (a trace's
  prefixes); the replay is told an id stands for ``block_size`` tokens (``trace_block_size``:
  left to its default, Mooncake's 512, a shared id of a 128-token block covered 512 tokens).
- The profile's ``prefill_ttft_ms`` is a measured TTFT (``metrics.profile``: the first token
  included), but the mocker emits a request's first token at the end of the decode step after
  its prefill, so its TTFT is the table's plus one step.  The replay is given the table less
  that step (``first_token_table``: prefill_ttft_ms(L) - decode_itl(KV = L, context = L), the
  step of one sequence of L tokens, bilinear in the grid, clamped at its edges; floored at
  0), so that a request alone gets the profile's TTFT back.
- Where the profile measured what a prefill adds to a decode step it shares (its mixed ladder:
  ``prefill_in_step_fit`` in the ``profile.json`` beside the NPZ; ``metrics.profile``), the
  replay's prefill table is that increment instead, so that a step carrying a prefill costs
  the decode step plus the increment, as vLLM runs a prefill chunk and the running decodes in
  one forward pass (the mocker adds its prefill time and its decode time: with the TTFT table
  a step carrying a 576-token prefill of vLLM CPU cost 47 ms in the replay against 36 ms
  measured).  The rest of the TTFT, ``serving_path_ms(L) = max(TTFT(L) - increment(L) -
  step(L), 0)`` (HTTP, tokenisation, the engine's own scheduling: time a request waits
  without holding the batch), is added to each request's replayed TTFT (``replay_tables``),
  so that a request alone still gets the profile's TTFT back.
- Back, per request: ``TTFT = ttft_ms / 1e3``; ``TPOT = (e2e_latency_ms - ttft_ms) / 1e3 /
  (output tokens - 1)`` (the harness's TPOT, ``metrics.request_metrics``); a request the
  replay did not complete has none (counted as failed).

The engine's knobs come from the candidate's runs' provenance (``engine_knobs``).  The
autoscaling policy and the router stay the plan's (``protocols.plan.fleet``): under
round-robin routing which replica serves a request depends on arrivals and the policy alone,
so the scheduler serves exactly the streams the policy produced; under least-loaded routing
the choice follows the processor-sharing model's counts in flight (an approximation the
plan states).  Replica start, drain and bill times stay the processor-sharing model's.

``sample`` below 1 (``protocol.replay_sample``) makes the model an approximation: a stratified
sample of each stream's stretches replayed, the others given their stratum's replayed
latencies (``protocols.plan.stretches``), said so by ``describe`` and ``serve_noted``'s note.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import select
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import results_io
from metrics.profile import MOCKER_KEYS, prefill_ms_at
from protocols.plan.stretches import StretchSample, combine, serve_sampled

MODELS = ("auto", "scheduler", "processor_sharing")
WORKER = Path(__file__).with_name("replay_worker.py")
DEFAULT_PYTHON = Path.home() / ".cache" / "tokenfactory" / "dynamo-venv" / "bin" / "python"
PROFILE_NPZ = results_io.PROFILE_TABLE
PROFILE_JSON = results_io.PROFILE

# the mocker's engine args, each with the names the harness's provenance records it under
# (vLLM's engine config, the features of a config, the mocker's own flags)
KNOBS = {
    "max_num_seqs": ("max_num_seqs",),
    "max_num_batched_tokens": ("max_num_batched_tokens", "max_batch_tokens"),
    "enable_chunked_prefill": ("enable_chunked_prefill", "chunked_prefill"),
    "enable_prefix_caching": ("enable_prefix_caching", "prefix_caching"),
    "block_size": ("block_size",),
    "num_gpu_blocks": ("num_gpu_blocks", "num_kv_blocks", "kv_cache_blocks", "num_gpu_blocks_override"),
}


def _flags(argv: list) -> dict:
    """``--name value`` and ``--[no-]name`` in a command line, as ``{name_with_underscores: value}``
    (a flag with no value: true; its ``--no-`` form: false)."""
    out: dict = {}
    for i, a in enumerate(argv):
        if not isinstance(a, str) or not a.startswith("--"):
            continue
        name = a[2:].replace("-", "_")
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if isinstance(nxt, str) and not nxt.startswith("--"):
            out.setdefault(name, nxt)
        elif name.startswith("no_"):
            out.setdefault(name[3:], False)
        else:
            out.setdefault(name, True)
    return out


def engine_knobs(provenance: dict) -> dict:
    """The mocker's engine args found in a run's ``provenance.json`` (its ``engine`` part,
    nested mappings searched breadth first, and the command lines in it, a worker's
    ``--num-gpu-blocks 12000`` as ``num_gpu_blocks``; the first name found of each knob's
    aliases; unset where none is recorded)."""
    out: dict = {}
    queue = [provenance.get("engine") or {}]
    while queue:
        node = queue.pop(0)
        argvs = [v for v in node.values() if isinstance(v, list) and v and all(isinstance(a, str) for a in v)]
        for found in [node, *(_flags(a) for a in argvs)]:
            for knob, names in KNOBS.items():
                for n in names:
                    v = found.get(n)
                    if knob not in out and v is not None and not isinstance(v, (dict, list)):
                        if knob.startswith("enable_"):
                            out[knob] = v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes")
                        else:
                            out[knob] = int(v)
        queue += [v for v in node.values() if isinstance(v, dict)]
    return out


def replica_layout(provenance: dict) -> tuple[int, str]:
    """(workers, the replay's router mode) of one replica as the run deployed it: a Dynamo
    frontend's workers behind it (``deployment.replicas``, its router policy: KV-aware as
    ``kv_router``, else ``round_robin``); one worker for any other engine."""
    dep = (provenance.get("engine") or {}).get("deployment") or {}
    if dep.get("router") != "dynamo-frontend":
        return 1, "round_robin"
    n = dep.get("replicas")
    mode = "kv_router" if "kv" in str(dep.get("router_policy", "")).lower() else "round_robin"
    return (int(n) if isinstance(n, int) and n >= 1 else 1), mode


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


def _ids_text(lo: int, hi: int) -> tuple[bytes, np.ndarray]:
    """``b"lo, lo+1, ..., hi-1, "`` and where each id's text starts in it (one more entry: the
    end), built digit by digit in numpy: ``", ".join(map(str, ...))`` was most of a trace's
    writing time."""
    ids = np.arange(lo, hi, dtype=np.int64)
    width = np.ones(ids.size, dtype=np.int64)
    for d in range(1, 19):
        width += ids >= 10 ** d
    out, offsets = [], np.zeros(ids.size + 1, dtype=np.int64)
    np.cumsum(width + 2, out=offsets[1:])
    for w in np.unique(width):
        group = ids[width == w]        # ids are ascending: one contiguous run per width
        chars = np.empty((group.size, int(w) + 2), dtype=np.uint8)
        for p in range(int(w)):
            chars[:, int(w) - 1 - p] = group // 10 ** p % 10 + 48
        chars[:, -2:] = (44, 32)       # ", "
        out.append(chars.tobytes())
    return b"".join(out), offsets


def write_trace(path: Path, arrival_s, prompt_tokens, output_tokens, block_size: int = 16,
                chunk: int = 8192, hash_ids=None) -> None:
    """The requests as a Mooncake trace (module doc): each line as ``json.dumps`` writes it
    (``{"timestamp": ms rounded to 3 decimals, "input_length", "output_length", "hash_ids"}``),
    the ids' text cut from one run built per chunk of lines.  ``hash_ids``, where given, are each
    request's own block ids (ceil(prompt / block_size) of them: requests sharing a leading run
    share that prefix in the replay's cache), written line by line; else every block is the
    request's own."""
    bs = max(int(block_size), 1)
    if hash_ids is not None:
        _write_trace_with_ids(path, arrival_s, prompt_tokens, output_tokens, bs, hash_ids)
        return
    prompt = np.maximum(np.asarray(prompt_tokens, dtype=np.int64), 1)
    out = np.maximum(np.asarray(output_tokens, dtype=np.int64), 1)
    ms = np.asarray(arrival_s, dtype=np.float64) * 1e3
    nb = -(-prompt // bs)
    end = np.cumsum(nb)
    start = end - nb
    with open(path, "wb") as f:
        for a in range(0, prompt.size, chunk):
            b = min(prompt.size, a + chunk)
            lo = int(start[a])
            text, off = _ids_text(lo, int(end[b - 1]))
            f.write(b"".join(
                b'{"timestamp": %s, "input_length": %d, "output_length": %d, "hash_ids": [%s]}\n'
                % (repr(round(t, 3)).encode(), p, o, text[x:y - 2])
                for t, p, o, x, y in zip(ms[a:b].tolist(), prompt[a:b].tolist(), out[a:b].tolist(),
                                         off[start[a:b] - lo].tolist(), off[end[a:b] - lo].tolist())))


def _write_trace_with_ids(path: Path, arrival_s, prompt_tokens, output_tokens, bs: int, hash_ids) -> None:
    rows = zip(np.asarray(arrival_s, float), np.asarray(prompt_tokens), np.asarray(output_tokens))
    with open(path, "w", encoding="utf-8") as f:
        for i, (t, p, o) in enumerate(rows):
            p, o = max(int(p), 1), max(int(o), 1)
            nb = -(-p // bs)
            ids = [int(h) for h in hash_ids[i]]
            if len(ids) != nb:
                raise ValueError(f"request {i}: {len(ids)} hash ids for {p} prompt tokens in blocks of {bs}")
            f.write(json.dumps({"timestamp": round(float(t) * 1e3, 3), "input_length": p, "output_length": o,
                                "hash_ids": ids}) + "\n")


RECORD_FIELDS = ("arrival_time_ms", "input_length", "requested_output_length", "ttft_ms", "e2e_latency_ms")


def read_records(path: Path, arrival_s, prompt_tokens, output_tokens) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT s, TPOT s) of the trace's requests from the replay's report (JSONL; ``match_records``)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                rows.append([np.nan if r.get(k) is None else r[k] for k in RECORD_FIELDS]
                            + [1.0 if r.get("terminal_status", "completed") == "completed" else 0.0])
    return match_records(np.array(rows, dtype=np.float64).reshape(len(rows), 6), arrival_s, prompt_tokens,
                         output_tokens, where=path)


def match_records(rec: np.ndarray, arrival_s, prompt_tokens, output_tokens,
                  where: object = "the replay") -> tuple[np.ndarray, np.ndarray]:
    """(TTFT s, TPOT s) of the trace's requests, in its order, from the replay's per-request
    records (rows of ``RECORD_FIELDS`` and completed 0/1, as ``replay_worker`` saves them;
    module doc).  Records are matched to requests by (arrival, prompt, output) order (the
    replay's arrivals start at the first request's: the order is the same); requests that tie
    on all three are interchangeable (both sorts are stable: the n-th tied record goes to the
    n-th tied request)."""
    prompt = np.maximum(np.asarray(prompt_tokens, dtype=np.int64), 1)
    out = np.maximum(np.asarray(output_tokens, dtype=np.int64), 1)
    n = prompt.size
    ttft, tpot = np.full(n, np.nan), np.full(n, np.nan)
    if rec.shape[0] != n:
        raise ValueError(f"{where}: {rec.shape[0]} records for {n} requests")
    rec = rec[np.lexsort((rec[:, 2], rec[:, 1], rec[:, 0]))]
    order = np.lexsort((out, prompt, np.round(np.asarray(arrival_s, dtype=np.float64) * 1e3, 3)))
    ok = (rec[:, 5] == 1.0) & np.isfinite(rec[:, 3])
    ttft[order[ok]] = rec[ok, 3] / 1e3
    k = out[order]
    dec = ok & (k > 1) & np.isfinite(rec[:, 4])
    tpot[order[dec]] = (rec[dec, 4] - rec[dec, 3]) / 1e3 / (k[dec] - 1)
    return ttft, tpot


def first_token_table(tables: dict) -> dict:
    """The mocker's arrays with ``prefill_ttft_ms`` less one decode step of a sequence of that
    prompt length (module doc)."""
    return replay_tables(tables)[0]


def _lone_step(tables: dict, isl: np.ndarray) -> np.ndarray:
    kv, ctx, itl = (np.asarray(tables[k], dtype=np.float64)
                    for k in ("decode_active_kv_tokens", "decode_context_length", "decode_itl"))
    # decode_itl[i, j] is the step at kv[i], ctx[j]: along KV first, then along the context
    return np.array([np.interp(x, ctx, [np.interp(x, kv, itl[:, j]) for j in range(ctx.size)]) for x in isl])


def replay_tables(tables: dict, in_step: dict | None = None) -> tuple[dict, np.ndarray]:
    """(the mocker's arrays as the replay is given them, ``serving_path_ms`` at each
    ``prefill_isl``; module doc).  ``in_step``: the coefficients of the profile's
    ``prefill_in_step_fit`` (None: the prefill table is the TTFT less one step, no serving path)."""
    isl = np.asarray(tables["prefill_isl"], dtype=np.float64)
    ttft = np.asarray(tables["prefill_ttft_ms"], dtype=np.float64)
    step = _lone_step(tables, isl)
    out = {k: np.asarray(v) for k, v in tables.items() if k in MOCKER_KEYS}
    if not in_step:
        out["prefill_ttft_ms"] = np.maximum(ttft - step, 0.0)
        return out, np.zeros_like(isl)
    inc = np.maximum(prefill_ms_at(in_step, isl), 0.0)
    out["prefill_ttft_ms"] = inc
    return out, np.maximum(ttft - inc - step, 0.0)


def prefill_in_step(profile: Path) -> dict | None:
    """The ``prefill_in_step_fit`` coefficients of the ``profile.json`` beside a profile's NPZ
    (None where there is none: a profile without the mixed ladder, or an NPZ of another tool)."""
    rec = profile.with_name(PROFILE_JSON)
    if not rec.is_file():
        return None
    try:
        fit = json.loads(rec.read_text(encoding="utf-8")).get("prefill_in_step_fit") or {}
    except (OSError, ValueError) as e:
        raise ValueError(f"{rec}: not readable as a profile record ({e})") from None
    return fit.get("coefficients") or None


class _Worker:
    """One ``replay_worker.py --serve`` process: jobs a line on its stdin, answers a line on its
    stdout; it ends at the end of its stdin (``close``, or this process gone)."""

    def __init__(self, python: Path):
        self.python = python
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env.setdefault("RUST_LOG", "warn")
        self.err = tempfile.TemporaryFile()     # a file, not a pipe: nobody drains its stderr while it runs
        self.proc = subprocess.Popen([str(python), str(WORKER), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err, env=env, text=True)

    def ask(self, job: dict, timeout_s: float) -> dict:
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
            line = self.proc.stdout.readline() if ready else ""
        except (BrokenPipeError, OSError):
            line = ""
        if line:
            return json.loads(line)
        if not ready:
            self.close()
            raise RuntimeError(f"Dynamo's replay ({self.python}) took over {timeout_s:g} s: stopped")
        rc = self.proc.wait()
        self.err.seek(0)
        tail = self.err.read().decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"Dynamo's replay ({self.python}) failed, exit {rc}: " + " | ".join(tail))

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.err.close()


_POOL: dict = {"pid": None, "workers": {}}   # this process's workers by Python; a forked child starts its own


def _workers(python: Path, n: int) -> list[_Worker]:
    if _POOL["pid"] != os.getpid():
        _POOL.update(pid=os.getpid(), workers={})
    have = _POOL["workers"].setdefault(str(python), [])
    have[:] = [w for w in have if w.alive]
    while len(have) < n:
        have.append(_Worker(python))
    return have[:n]


@atexit.register
def close_workers() -> None:
    """Stop this process's replay workers (also at exit)."""
    if _POOL["pid"] == os.getpid():
        for ws in _POOL["workers"].values():
            for w in ws:
                w.close()
    _POOL["workers"] = {}


@dataclass
class SchedulerModel:
    """What a replica is under the scheduler model: the profile, the engine's knobs, the
    Python that runs the replay."""
    python: Path
    profile: Path
    knobs: dict = field(default_factory=dict)
    timeout_s: float = 3600.0        # one stream's replay
    cache_dir: Path | None = None    # replays kept by their inputs' hash (None: a folder under the temp dir)
    workers: int = 0                 # replay processes serving streams side by side (0: one per core)
    replica_workers: int = 1         # engine workers in one replica (a Dynamo frontend's, replica_layout)
    router_mode: str = "round_robin"  # how the replica's frontend routes among them
    # the profile's prefill_in_step_fit coefficients (module doc); None: read from the profile.json
    # beside the NPZ, where there is one
    in_step: dict | None = None
    # below a fraction of 1: each stream's stretches sampled, not all replayed (protocols.plan.stretches)
    sample: StretchSample = field(default_factory=StretchSample)

    def __post_init__(self) -> None:
        if self.in_step is None:
            self.in_step = prefill_in_step(Path(self.profile))

    def engine_args(self, table: Path | None = None) -> dict:
        return {**self.knobs, "planner_profile_data": str(table or self.profile)}

    def describe(self) -> dict:
        out = {"profile": str(self.profile), "engine_args": self.engine_args(), "python": str(self.python),
               "replica_workers": self.replica_workers, "router_mode": self.router_mode,
               "prefill_charged": ("the prefill's increment of a decode step (the profile's mixed ladder), "
                                   "the rest of its TTFT added as serving path") if self.in_step else
                                  "the prefill's TTFT less one step (the profile has no mixed ladder)",
               "prefill_in_step": self.in_step}
        if not self.sample.exact:
            out["approximate"] = {**self.sample.describe(), "text": self.sample.text()}
        return out

    def key(self, stream: tuple) -> str:
        """A stream's cache key: the engine's args, the profile's bytes and prefill increment, the
        stream's arrays."""
        # the profile by its bytes, not its path: a stream's key (and the sample it seeds) is the
        # same wherever the profile lies
        # "ids per block": entries replayed while the replay read each id as 512 tokens (its
        # default, not the trace's block) hold wrong prefix hits, and are not read back
        ident = [self.knobs, self.replica_workers, self.router_mode, self.in_step, "ids per block"]
        if not self.sample.exact:        # exact replays keep their keys (and their cache entries)
            ident.append(self.sample.describe())
        h = hashlib.sha256(json.dumps(ident, sort_keys=True).encode())
        h.update(hashlib.sha256(self.profile.read_bytes()).digest())
        for a in stream[:3]:
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
            h.update(b"|")
        if len(stream) > 3:              # the requests' own block ids (prefix sharing)
            h.update(json.dumps([[int(x) for x in ids] for ids in stream[3]]).encode())
        return h.hexdigest()

    def serve(self, streams: list[tuple]) -> list[tuple[np.ndarray, np.ndarray]]:
        """``serve_noted`` without the note."""
        return self.serve_noted(streams)[0]

    def serve_noted(self, streams: list[tuple]) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict | None]:
        """Each stream (arrival s, prompt tokens, output tokens[, each request's block ids];
        arrival order) replayed on one replica; its requests' (TTFT, TPOT), in its order (module
        doc).  The replay is deterministic, so a stream is replayed once and read back from the
        cache after (each stream by its own hash: a resample whose policy routed some replicas as
        another simulation did reuses those); the streams not cached are replayed side by side by
        long-lived worker processes (``workers``).  With ``sample`` below 1 a stream's stretches
        are sampled (``protocols.plan.stretches``): the note (``stretches.combine``) says how
        much was replayed; None where every stream was replayed whole."""
        folder = self.cache_dir or Path(tempfile.gettempdir()) / "tokenfactory-replay-cache"
        got: list = [None] * len(streams)
        notes: list = [None] * len(streams)
        todo: dict[str, list[int]] = {}
        for k, s in enumerate(streams):
            if len(s[0]) == 0:
                got[k] = (np.zeros(0), np.zeros(0))
                continue
            key = self.key(s)
            hit = folder / f"{key}.npz"
            if hit.is_file():
                with np.load(hit) as z:
                    got[k] = (z["ttft"], z["tpot"])
                    notes[k] = json.loads(str(z["note"])) if "note" in z.files else None
            else:
                todo.setdefault(key, []).append(k)
        if todo:
            keys = list(todo)
            # the stream's own key seeds its sample: the same stream, the same sample
            done, made = serve_sampled([streams[todo[key][0]] for key in keys], self._replay, self.sample,
                                       [int(key[:15], 16) for key in keys])
            folder.mkdir(parents=True, exist_ok=True)
            for key, res, nt in zip(keys, done, made):
                hit = folder / f"{key}.npz"
                tmp = hit.with_suffix(f".{os.getpid()}.{threading.get_ident()}.npz")
                np.savez(tmp, ttft=res[0], tpot=res[1], **({"note": json.dumps(nt)} if nt else {}))
                os.replace(tmp, hit)
                for k in todo[key]:
                    got[k], notes[k] = res, nt
        return got, combine(notes, self.sample)

    def _replay(self, streams: list[tuple]) -> list[tuple[np.ndarray, np.ndarray]]:
        got: list = [None] * len(streams)
        # the longest first, so that the last to finish is a short one
        queue = sorted(range(len(streams)), key=lambda k: -float(np.sum(streams[k][2])))
        lock = threading.Lock()
        n = min(len(streams), self.workers or os.cpu_count() or 1)
        with tempfile.TemporaryDirectory(prefix="tf-replay-") as tmp:
            table = Path(tmp) / PROFILE_NPZ
            with np.load(self.profile) as z:
                tables, serving = replay_tables({k: z[k] for k in z.files}, self.in_step)
            np.savez(table, **tables)
            isl = np.asarray(tables["prefill_isl"], dtype=np.float64)
            args = self.engine_args(table)
            block_size = int(self.knobs.get("block_size", 16))    # the trace's ids: one per block

            def drain(worker: _Worker) -> None:
                try:
                    while True:
                        with lock:
                            if not queue:
                                return
                            k = queue.pop(0)
                        one(worker, k)
                except BaseException:
                    with lock:           # one failed: the others stop after their current stream
                        queue.clear()
                    raise

            def one(worker: _Worker, k: int) -> None:
                arr, pr, ou = streams[k][:3]
                tr, rep, rec = (Path(tmp) / f"{w}{k}.{x}" for w, x in (("trace", "jsonl"), ("report", "jsonl"),
                                                                     ("records", "npy")))
                write_trace(tr, arr, pr, ou, block_size,
                            hash_ids=streams[k][3] if len(streams[k]) > 3 else None)
                ans = worker.ask({"engine_args": args, "router_mode": self.router_mode,
                                  "num_workers": self.replica_workers, "trace": str(tr), "report": str(rep),
                                  "records": str(rec), "trace_block_size": block_size}, self.timeout_s)
                if not ans.get("ok"):
                    raise RuntimeError(f"Dynamo's replay ({self.python}) failed: {ans.get('error')}")
                ttft, tpot = match_records(np.load(rec), arr, pr, ou, where=rep)
                got[k] = (ttft + np.interp(np.maximum(np.asarray(pr, dtype=np.float64), 1.0), isl, serving) / 1e3,
                          tpot)
                for f in (tr, rep, rec):      # a day's trace is hundreds of MB: not kept to the end
                    f.unlink(missing_ok=True)

            workers = _workers(self.python, n)
            with ThreadPoolExecutor(max_workers=n) as ex:
                for f in [ex.submit(drain, w) for w in workers]:
                    f.result()
        return got
