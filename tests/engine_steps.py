"""An engine's steps, simulated with their ground truth: request rows (``requests.parquet``'s
timing columns) of a closed loop on an engine whose step time is known, for the profile's
figures to recover."""

from __future__ import annotations

import numpy as np

MS = 1_000_000  # ns


def closed_loop_rows(c: int, n_requests: int, step_ms: float, prefill_ms: float, prompt_tokens: int = 256,
                     seed: int = 0) -> list[dict]:
    """An engine stepping ``c`` requests in a closed loop: a step takes ``step_ms``, plus
    ``prefill_ms`` for each request whose prefill it runs (that request's first token at the
    step's end); every decoding request gets a token at each step's end, read up to 0.3 ms
    late; output lengths 8..40, so the requests' prefills fall among the others' decodes."""
    rng = np.random.default_rng(seed)
    t, made, rows, running, waiting = 0.0, 0, [], [], []

    def new() -> None:
        nonlocal made
        if made < n_requests:
            waiting.append({"left": int(rng.integers(8, 41)), "chunks": []})
            made += 1

    for _ in range(c):
        new()
    while running or waiting:
        prefills, waiting = waiting, []
        t += step_ms + prefill_ms * len(prefills)
        for r in running + prefills:
            r["chunks"].append(round((t + rng.uniform(0, 0.3)) * MS))
            r["left"] -= 1
        running += prefills
        for r in [r for r in running if r["left"] == 0]:
            running.remove(r)
            rows.append({"status": "ok", "warmup": False, "prompt_tokens": prompt_tokens,
                         "output_tokens": len(r["chunks"]),
                         "first_token_ns": r["chunks"][0], "end_ns": r["chunks"][-1], "chunk_ns": r["chunks"],
                         "chunk_tokens": [1] * len(r["chunks"])})
            new()
    return rows

