"""JSON traces: Mooncake JSON lines, our own JSON lines, ShareGPT JSON."""

from __future__ import annotations

import numpy as np

from loadgen.trace_input import BadLines, TraceError, check_file, empty_trace, sessions_from_ids, sorted_by_time
from loadgen.trace_table import WorkloadTable

# ---------------------------------------------------------------------------- JSON lines
def _json_lines(path: str, bad: BadLines):
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


def _nonneg_int(obj: dict, key: str, required: bool = True):
    v = obj.get(key)
    if v is None:
        if required:
            raise ValueError(f"missing {key!r}")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or int(v) != v:
        raise ValueError(f"{key!r} must be a non-negative integer, got {v!r}")
    return int(v)


def _number(obj: dict, key: str, required: bool = True):
    v = obj.get(key)
    if v is None:
        if required:
            raise ValueError(f"missing {key!r}")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        raise ValueError(f"{key!r} must be a number, got {v!r}")
    return float(v)


def read_mooncake(path, on_bad_line: str = "error") -> WorkloadTable:
    """Mooncake JSON lines: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``."""
    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    ts, ins, outs, lines, offs, vals = [], [], [], [], [0], []
    for lineno, raw, obj in _json_lines(path, bad):
        try:
            t = _number(obj, "timestamp")
            a = _nonneg_int(obj, "input_length")
            b = _nonneg_int(obj, "output_length")
            h = obj.get("hash_ids", [])
            if not isinstance(h, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in h):
                raise ValueError("'hash_ids' must be a list of integers")
            if len(h) * 512 < a:
                raise ValueError(f"{len(h)} hash_ids of 512 tokens cannot cover input_length={a}")
        except ValueError as e:
            bad(lineno, raw.decode("utf-8", "replace"), str(e))
            continue
        ts.append(t)
        ins.append(a)
        outs.append(b)
        lines.append(lineno)
        vals.extend(h)
        offs.append(len(vals))
    if not ts:
        raise empty_trace(path)
    ts = np.asarray(ts, dtype=np.float64) / 1e3
    return sorted_by_time(WorkloadTable(arrival_s=ts - ts.min(), input_tokens=np.asarray(ins, dtype=np.int64),
                                 output_tokens=np.asarray(outs, dtype=np.int64), source="mooncake", path=path,
                                 hash_offsets=np.asarray(offs, dtype=np.int64),
                                 hash_values=np.asarray(vals, dtype=np.int64), line=np.asarray(lines, dtype=np.int64),
                                 bad_lines=bad.count))


def read_jsonl(path, on_bad_line: str = "error") -> WorkloadTable:
    """Our own JSON-lines trace: one request per line.

    Fields (``timestamp`` optional everywhere or nowhere):

    - ``timestamp``: seconds (any origin; replay starts at the earliest), optional.
    - ``input_tokens`` (int) or ``prompt`` (str, the user's message): one is required.
    - ``output_tokens`` (int): required.
    - ``session_id`` (str or int) and ``turn`` (int, from 0), optional: a multi-turn
      session; turns after the first are sent when the previous one ended plus
      ``think_s`` (seconds, default: the gap between the turns' timestamps, else 0).
    - ``prefix_group`` (str or int) and ``prefix_tokens`` (int), optional: requests of one
      group start with the same ``prefix_tokens`` tokens.
    """
    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    ts, ins, outs, lines, texts, sids, turns, thinks, groups, plens = ([] for _ in range(10))
    any_text = False
    for lineno, raw, obj in _json_lines(path, bad):
        try:
            t = _number(obj, "timestamp", required=False)
            prompt = obj.get("prompt")
            if prompt is not None and not isinstance(prompt, str):
                raise ValueError("'prompt' must be a string")
            a = _nonneg_int(obj, "input_tokens", required=prompt is None)
            b = _nonneg_int(obj, "output_tokens")
            if b < 1:
                raise ValueError("'output_tokens' must be >= 1")
            turn = _nonneg_int(obj, "turn", required=False)
            think = _number(obj, "think_s", required=False)
            plen = _nonneg_int(obj, "prefix_tokens", required=False)
            grp = obj.get("prefix_group")
            if (grp is None) != (plen is None):
                raise ValueError("'prefix_group' and 'prefix_tokens' go together")
            if plen is not None and a is not None and plen > a:
                raise ValueError(f"'prefix_tokens'={plen} exceeds 'input_tokens'={a}")
            sid = obj.get("session_id")
        except ValueError as e:
            bad(lineno, raw.decode("utf-8", "replace"), str(e))
            continue
        any_text |= prompt is not None
        ts.append(np.nan if t is None else t)
        ins.append(-1 if a is None else a)
        outs.append(b)
        texts.append(prompt)
        sids.append("" if sid is None else str(sid))
        turns.append(turn)
        thinks.append(np.nan if think is None else think)
        groups.append("" if grp is None else str(grp))
        plens.append(0 if plen is None else plen)
        lines.append(lineno)
    if not lines:
        raise empty_trace(path)
    ts = np.asarray(ts, dtype=np.float64)
    if np.isnan(ts).any() and not np.isnan(ts).all():
        first = lines[int(np.flatnonzero(np.isnan(ts))[0])]
        raise TraceError(f"{path}:{first}: 'timestamp' missing here but present on other lines; give it on "
                         "every line or on none")
    table = WorkloadTable(arrival_s=ts - (np.nanmin(ts) if not np.isnan(ts).all() else 0.0),
                          input_tokens=np.asarray(ins, dtype=np.int64), output_tokens=np.asarray(outs, dtype=np.int64),
                          source="jsonl", path=path, line=np.asarray(lines, dtype=np.int64), bad_lines=bad.count,
                          text=texts if any_text else None)
    gnames = np.asarray(groups)
    if (gnames != "").any():
        uniq, codes = np.unique(gnames, return_inverse=True)
        codes = codes.astype(np.int64)
        if "" in uniq:
            e = int(np.searchsorted(uniq, ""))
            codes = np.where(codes == e, -1, codes - (codes > e))
        table.prefix_group, table.prefix_tokens = codes, np.asarray(plens, dtype=np.int64)
    sid = np.asarray(sids)
    if (sid != "").any():
        # Turn order: the explicit ``turn`` where given, else the timestamp, else line order.
        key = np.asarray([t if t is not None else np.nan for t in turns], dtype=np.float64)
        fallback = table.arrival_s if not np.isnan(table.arrival_s).all() else np.arange(len(table), dtype=np.float64)
        key = np.where(np.isnan(key), fallback, key)
        sessions_from_ids(table, sid, None, order_key=key)
        explicit = np.asarray(thinks)
        table.think_s = np.where(~np.isnan(explicit) & (table.turn > 0), explicit, table.think_s)
    return sorted_by_time(table)


def read_sharegpt(path, on_bad_line: str = "error") -> WorkloadTable:
    """ShareGPT JSON: each conversation a session, each human message a turn whose output
    length is the following gpt message (its text is kept; lengths are counted with the
    served model's tokenizer when prompts are built)."""
    import orjson

    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        raise empty_trace(path)
    try:
        convs = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        # orjson reports a character position; turn it into a line for the message.
        pos = getattr(e, "pos", 0) or 0
        lineno = data[:pos].count(b"\n") + 1
        line = data.splitlines()[lineno - 1] if data.splitlines() else b""
        raise TraceError(f"{path}:{lineno}: not JSON ({e}): {line[:200].decode('utf-8', 'replace')!r}") from None
    if not isinstance(convs, list):
        raise TraceError(f"{path}: not a ShareGPT file: expected a JSON list of conversations")
    texts, outs_text, sess, turns, names = [], [], [], [], []
    for ci, conv in enumerate(convs):
        msgs = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(msgs, list):
            bad(ci + 1, str(conv)[:200], f"conversation #{ci} has no 'conversations' list")
            continue
        k = 0
        for mi, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("from") not in ("human", "user") or not isinstance(m.get("value"), str):
                continue
            nxt = msgs[mi + 1] if mi + 1 < len(msgs) else None
            if not (isinstance(nxt, dict) and nxt.get("from") in ("gpt", "assistant", "chatgpt")
                    and isinstance(nxt.get("value"), str)):
                continue  # a question without an answer: no output length to replay
            texts.append(m["value"])
            outs_text.append(nxt["value"])
            sess.append(len(names))
            turns.append(k)
            k += 1
        if k:
            names.append(str(conv.get("id", ci)))
    if not texts:
        raise empty_trace(path, "conversations with a human turn and a reply")
    n = len(texts)
    turns = np.asarray(turns, dtype=np.int32)
    return WorkloadTable(arrival_s=np.full(n, np.nan), input_tokens=np.full(n, -1, dtype=np.int64),
                         output_tokens=np.full(n, -1, dtype=np.int64), source="sharegpt", path=path,
                         session=np.asarray(sess, dtype=np.int64), turn=turns,
                         think_s=np.full(n, np.nan), text=texts, output_text=outs_text,
                         line=np.arange(1, n + 1, dtype=np.int64), session_names=names, bad_lines=bad.count)
