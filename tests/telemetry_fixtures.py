"""Synthetic telemetry and request tables for the energy and cost tests (seconds -> ns)."""

import math

import numpy as np
import pyarrow as pa

from loadgen.records import SCHEMA as REQUEST_SCHEMA
from loadgen.records import RequestRecord
from metrics.telemetry.base import SCHEMA as TELEMETRY_SCHEMA

S = 1_000_000_000


def telemetry_table(rows) -> pa.Table:
    """rows: (t_seconds, source, name, value, detail) -> a telemetry.parquet table."""
    cols = list(zip(*[(int(round(t * S)), src, name, float(v), d) for t, src, name, v, d in rows]))
    return pa.table({n: list(c) for n, c in zip(TELEMETRY_SCHEMA.names, cols)}, schema=TELEMETRY_SCHEMA)


def power_profile(t, idle_until=2.0, idle_w=50.0, load_w=250.0):
    return idle_w if t < idle_until else load_w


def energy_at(t, idle_until=2.0, idle_w=50.0, load_w=250.0):
    """Exact energy since t=0 of the piecewise-constant profile above."""
    return idle_w * min(t, idle_until) + load_w * max(0.0, t - idle_until)


def gpu_rows(dev="gpu0", source="nvml", t_end=10.0, dt=0.1, offset_j=1.0e6, counter=True, power=True, **kw):
    rows = []
    for i in range(int(round(t_end / dt)) + 1):
        t = i * dt
        if counter:
            rows.append((t, source, f"{dev}.energy_counter_j", offset_j + energy_at(t, **kw), None))
        if power:
            rows.append((t, source, f"{dev}.power_w", power_profile(t, **kw), None))
    return rows


_DEFAULT = RequestRecord(request_id="")


def request_table(rows: list[dict]) -> pa.Table:
    """Request rows with sensible defaults; times in seconds."""
    out = {n: [] for n in REQUEST_SCHEMA.names}
    for i, r in enumerate(rows):
        sent = r.get("sent", float(i))
        done = r.get("done", sent + 1.0)
        status = r.get("status", "ok")
        toks = r.get("output_tokens", 10)
        chunks = r.get("chunks")
        if chunks is None and status == "ok" and toks:
            first = sent + r.get("ttft", 0.1)
            chunks = list(np.linspace(first, done, toks)) if toks > 1 else [first]
        chunks = chunks or []
        d = {
            "request_id": f"r{i}", "response_id": f"x{i}", "session_id": r.get("session"), "turn": r.get("turn", 0),
            "scheduled_ns": int(sent * S), "slot_ns": int(sent * S), "sent_ns": int(sent * S),
            "first_token_ns": int(chunks[0] * S) if chunks else None,
            "end_ns": int(chunks[-1] * S) if chunks else None, "done_ns": int(done * S),
            "chunk_ns": [int(c * S) for c in chunks], "chunk_tokens": [1] * len(chunks),
            "prompt_tokens": 32, "expected_prompt_tokens": 32, "max_tokens": 64,
            "output_tokens": toks if (status == "ok" or r.get("partial")) else None,
            "tokens_source": "usage", "status": status, "http_status": r.get("http", 200 if status == "ok" else None),
            "error": None if status == "ok" else "boom", "finish_reason": "length" if status == "ok" else None,
            "ttft_s": (chunks[0] - sent) if chunks else None,
            "tpot_s": ((chunks[-1] - chunks[0]) / (len(chunks) - 1)) if len(chunks) > 1 else None,
            "e2el_s": (chunks[-1] - sent) if chunks else None, "connect_s": None,
            "slo_ok": status == "ok", "warmup": r.get("warmup", False),
        }
        d.update({k: v for k, v in r.items() if k in out})
        for k in out:  # columns the rows above do not name (side, shadow, worker...): the record's default
            out[k].append(d[k] if k in d else getattr(_DEFAULT, k))
    return pa.table(out, schema=REQUEST_SCHEMA)


def nan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)
