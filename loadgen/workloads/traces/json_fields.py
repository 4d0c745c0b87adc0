"""What the JSON trace readers share: JSON lines with bad-line handling, field checks."""

from __future__ import annotations

import numpy as np

from loadgen.workloads.traces.common import BadLines, TraceError, empty_trace


def json_lines(path: str, bad: BadLines):
    import orjson

    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                bad(lineno, raw.decode("utf-8", "replace"), f"not JSON ({e})")
                continue
            if not isinstance(obj, dict):
                bad(lineno, raw.decode("utf-8", "replace"), "expected a JSON object")
                continue
            yield lineno, raw, obj


def json_document(path: str):
    """The whole file as one JSON document (ShareGPT's list, SGLang's agentic trace); a file
    that is not JSON fails naming the line of the error and its text."""
    import orjson

    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        raise empty_trace(path)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        # orjson reports a character position; turn it into a line for the message.
        pos = getattr(e, "pos", 0) or 0
        lineno = data[:pos].count(b"\n") + 1
        lines = data.splitlines()
        line = lines[lineno - 1] if lineno <= len(lines) else b""
        raise TraceError(f"{path}:{lineno}: not JSON ({e}): {line[:200].decode('utf-8', 'replace')!r}") from None


MAX_COUNT = 2**31 - 1  # token counts and turn numbers


def _given(obj: dict, key: str, required: bool):
    """``obj[key]``; None where it is absent or null, a ValueError naming it where it is ``required``."""
    v = obj.get(key)
    if v is None and required:
        raise ValueError(f"missing {key!r}")
    return v


def nonneg_int(obj: dict, key: str, required: bool = True):
    v = _given(obj, key, required)
    if v is None:
        return None
    if (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0
            or (isinstance(v, float) and not np.isfinite(v))
            or int(v) != v):
        raise ValueError(f"{key!r} must be a non-negative integer, got {v!r}")
    if v > MAX_COUNT:  # (no context is that long; it would also overflow the int64 columns)
        raise ValueError(f"{key!r}={v} is out of range (at most {MAX_COUNT})")
    return int(v)


def number(obj: dict, key: str, required: bool = True):
    v = _given(obj, key, required)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        raise ValueError(f"{key!r} must be a number, got {v!r}")
    return float(v)
