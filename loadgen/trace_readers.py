"""Trace readers: a file of a public trace format -> a ``WorkloadTable``.

Formats (``workload=NAME`` with ``workload.path=FILE``):

- ``azure``: Azure LLM inference traces 2023 and 2024, CSV ``TIMESTAMP,ContextTokens,
  GeneratedTokens``; timestamps ``2023-11-16 18:17:03.9799600`` (up to 9 fractional
  digits, or none) with or without a ``+00:00``/``Z`` zone.
- ``burstgpt``: BurstGPT CSV ``Timestamp,Model,Request tokens,Response tokens,Total tokens,
  Log Type`` (seconds); release 3 adds ``Session ID,Elapsed time``.  ``workload.model_filter``
  keeps one model's rows.  Rows with 0 response tokens (failed requests in the trace) are
  dropped and counted in the notes.
- ``mooncake``: JSON lines ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}``;
  each hash id is one block of 512 tokens.
- ``sharegpt``: JSON ``[{"id", "conversations": [{"from": "human"|"gpt", "value"}]}]``; each
  conversation is a session, each human message a turn (no arrival times).
- ``jsonl``: our own JSON lines, one request per line (see ``read_jsonl``).

Bad input: a malformed line stops the read with the file, line number and the offending
text; with ``workload.on_bad_line=skip`` it is skipped and counted (``table.bad_lines``).
Large CSVs are read by pyarrow in one pass; when that fails, the file is re-read line by
line to name the first bad line (or to skip and count them).
"""

from __future__ import annotations

import csv
import io
import os
import re

import numpy as np

from loadgen.trace_table import WorkloadTable

FORMATS = ("azure", "burstgpt", "mooncake", "sharegpt", "jsonl")
BAD_LINE_POLICIES = ("error", "skip")


class TraceError(ValueError):
    """A trace the user gave cannot be read; the message names the file and line."""


class _BadLines:
    def __init__(self, path: str, policy: str):
        if policy not in BAD_LINE_POLICIES:
            raise TraceError(f"workload.on_bad_line={policy!r}: expected one of {BAD_LINE_POLICIES}")
        self.path, self.policy, self.count = path, policy, 0

    def __call__(self, lineno: int, text: str, why: str) -> None:
        if self.policy == "skip":
            self.count += 1
            return
        snippet = text.rstrip("\r\n")
        snippet = snippet if len(snippet) <= 200 else snippet[:200] + "..."
        raise TraceError(f"{self.path}:{lineno}: {why}: {snippet!r} "
                         "(workload.on_bad_line=skip skips and counts such lines)")


def _check_file(path) -> str:
    if not path:
        raise TraceError("workload.path is not set: give the trace file with workload.path=FILE")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TraceError(f"workload.path={path}: no such file")
    return path


def _first_line(path: str) -> str:
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        return f.readline().lstrip("\ufeff").rstrip("\r\n")


def _empty(path: str, what: str = "requests") -> TraceError:
    return TraceError(f"{path}: the trace has no {what}")


# ---------------------------------------------------------------------------- timestamps
_TS = re.compile(r"^(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?$")


def parse_timestamp_ns(text: str) -> int:
    """One Azure-style timestamp -> ns since the epoch (UTC); ValueError when malformed."""
    m = _TS.match(text.strip())
    if not m:
        raise ValueError("not a timestamp like 2023-11-16 18:17:03.9799600[+00:00]")
    base = np.datetime64(f"{m.group(1)}T{m.group(2)}", "ns").astype(np.int64)
    frac = int((m.group(3) or "0").ljust(9, "0"))
    zone = m.group(4)
    off = 0
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        hh, mm = int(zone[1:3]), int(zone[-2:])
        off = sign * (hh * 3600 + mm * 60) * 1_000_000_000
    return int(base) + frac - off


def _timestamps_fast(col):
    """A pyarrow string column of timestamps -> int64 ns (UTC); raises on anything odd."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # A zero zone is dropped; any other zone is left in and makes the cast fail (slow path).
    naive = pc.replace_substring_regex(col, r"(Z|[+-]00:?00)$", "")
    return naive.cast(pa.timestamp("ns")).cast(pa.int64()).to_numpy(zero_copy_only=False)


def _relative(ns: np.ndarray) -> np.ndarray:
    return (ns - ns.min()).astype(np.float64) / 1e9 if ns.size else ns.astype(np.float64)


# ---------------------------------------------------------------------------- CSV
def _int_field(v: str) -> int:
    x = int(v.strip())
    if x < 0:
        raise ValueError("negative")
    return x


def _float_field(v: str) -> float:
    x = float(v.strip())
    if not np.isfinite(x):
        raise ValueError("not finite")
    return x


def _csv_slow(path: str, header: list[str], parsers: dict, bad: _BadLines) -> tuple[dict, np.ndarray]:
    """Line-by-line CSV: every column named in ``parsers`` parsed by its function."""
    idx = {name: header.index(name) for name in parsers}
    out = {name: [] for name in parsers}
    lines = []
    with open(path, "r", encoding="utf-8", errors="replace", newline="") as f:
        f.readline()
        for lineno, raw in enumerate(f, start=2):
            if not raw.strip():
                continue
            try:
                fields_ = next(csv.reader(io.StringIO(raw)))
            except (csv.Error, StopIteration) as e:
                bad(lineno, raw, f"unreadable CSV ({e})")
                continue
            if len(fields_) != len(header):
                bad(lineno, raw, f"expected {len(header)} fields ({','.join(header)}), got {len(fields_)}")
                continue
            row = {}
            for name, parse in parsers.items():
                try:
                    row[name] = parse(fields_[idx[name]])
                except (ValueError, OverflowError) as e:
                    bad(lineno, raw, f"bad {name} {fields_[idx[name]]!r} ({e})")
                    break
            else:
                for name, v in row.items():
                    out[name].append(v)
                lines.append(lineno)
    return out, np.asarray(lines, dtype=np.int64)


def _csv_fast(path: str, types: dict):
    """pyarrow's CSV reader; returns None when the file is not clean (then the slow path names the line)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    try:
        return pcsv.read_csv(path, read_options=pcsv.ReadOptions(block_size=1 << 24),
                             convert_options=pcsv.ConvertOptions(column_types=types, include_columns=list(types)))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None


def _check_header(path: str, header: list[str], needed: list[str], fmt: str) -> None:
    missing = [c for c in needed if c not in header]
    if missing:
        raise TraceError(f"{path}: not a {fmt} trace: the header {','.join(header)!r} lacks {', '.join(missing)} "
                         f"(expected {','.join(needed)})")


AZURE_COLUMNS = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


def read_azure(path, on_bad_line: str = "error") -> WorkloadTable:
    """Azure LLM inference trace (2023 or 2024 format)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    path = _check_file(path)
    bad = _BadLines(path, on_bad_line)
    header = [h.strip() for h in _first_line(path).split(",")]
    if header == [""]:
        raise _empty(path)
    _check_header(path, header, AZURE_COLUMNS, "Azure (TIMESTAMP,ContextTokens,GeneratedTokens)")
    t = _csv_fast(path, {"TIMESTAMP": pa.string(), "ContextTokens": pa.int64(), "GeneratedTokens": pa.int64()})
    ns = None
    if t is not None and t.num_rows:
        try:
            # chunk by chunk: the zone-stripped copy of the text is never whole in memory
            ns = np.concatenate([_timestamps_fast(c) for c in t.column("TIMESTAMP").chunks])
            ins = t.column("ContextTokens").to_numpy(zero_copy_only=False)
            outs = t.column("GeneratedTokens").to_numpy(zero_copy_only=False)
            # Nulls (empty fields) or negatives: let the slow path name the line.
            if t.column("ContextTokens").null_count or t.column("GeneratedTokens").null_count \
                    or pc.any(pc.is_null(t.column("TIMESTAMP"))).as_py() or (ins < 0).any() or (outs < 0).any():
                ns = None
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            ns = None
        lines = None  # clean file: row i is line i + 2 (header, then one row per line)
    if ns is None:
        cols, lines = _csv_slow(path, header, {"TIMESTAMP": parse_timestamp_ns, "ContextTokens": _int_field,
                                               "GeneratedTokens": _int_field}, bad)
        ns = np.asarray(cols["TIMESTAMP"], dtype=np.int64)
        ins = np.asarray(cols["ContextTokens"], dtype=np.int64)
        outs = np.asarray(cols["GeneratedTokens"], dtype=np.int64)
    del t
    if ns.size == 0:
        raise _empty(path)
    if lines is None:
        lines = np.arange(2, ns.size + 2, dtype=np.int64)
    table = WorkloadTable(arrival_s=_relative(ns), input_tokens=ins.astype(np.int64, copy=False),
                          output_tokens=outs.astype(np.int64, copy=False), source="azure", path=path, line=lines,
                          bad_lines=bad.count)
    return _sorted(table)


def _sorted(table: WorkloadTable) -> WorkloadTable:
    a = table.arrival_s
    if a.size > 1 and (np.diff(a[~np.isnan(a)]) < 0).any():
        table = table.take(np.argsort(a, kind="stable"))
        table.notes.append("rows were not in time order; sorted by timestamp")
    return table


BURST_COLUMNS = ["Timestamp", "Model", "Request tokens", "Response tokens"]


def read_burstgpt(path, on_bad_line: str = "error", model_filter: str | None = None) -> WorkloadTable:
    """BurstGPT CSV, releases 1 (no sessions) and 3 (``Session ID``, ``Elapsed time``)."""
    import pyarrow as pa

    path = _check_file(path)
    bad = _BadLines(path, on_bad_line)
    header = [h.strip() for h in _first_line(path).split(",")]
    if header == [""]:
        raise _empty(path)
    _check_header(path, header, BURST_COLUMNS, "BurstGPT")
    has_sessions = "Session ID" in header
    has_elapsed = "Elapsed time" in header
    types = {"Timestamp": pa.float64(), "Model": pa.string(), "Request tokens": pa.int64(),
             "Response tokens": pa.int64()}
    parsers = {"Timestamp": _float_field, "Model": str.strip, "Request tokens": _int_field,
               "Response tokens": _int_field}
    if has_sessions:
        types["Session ID"] = pa.string()
        parsers["Session ID"] = str.strip
    if has_elapsed:
        types["Elapsed time"] = pa.float64()
        parsers["Elapsed time"] = _float_field
    t = _csv_fast(path, types)
    if t is not None and all(t.column(c).null_count == 0 for c in types if c != "Session ID"):
        cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in types}
        lines = np.arange(2, t.num_rows + 2, dtype=np.int64)
        if (cols["Request tokens"] < 0).any() or (cols["Response tokens"] < 0).any():
            t = None
    else:
        t = None
    if t is None:
        raw, lines = _csv_slow(path, header, parsers, bad)
        cols = {c: np.asarray(v) for c, v in raw.items()}
    if lines.size == 0:
        raise _empty(path)
    keep = np.ones(lines.size, dtype=bool)
    notes = []
    if model_filter:
        keep &= cols["Model"].astype(str) == str(model_filter)
        if not keep.any():
            models = sorted(set(cols["Model"].astype(str).tolist()))[:10]
            raise TraceError(f"{path}: workload.model_filter={model_filter!r} matches no row (models: {models})")
    zero = keep & (cols["Response tokens"].astype(np.int64) == 0)
    if zero.any():
        notes.append(f"{int(zero.sum())} rows with 0 response tokens (failed in the trace) dropped")
        keep &= ~zero
    if not keep.any():
        raise _empty(path, "requests with a response")
    ts = cols["Timestamp"].astype(np.float64)[keep]
    table = WorkloadTable(arrival_s=ts - ts.min(), input_tokens=cols["Request tokens"].astype(np.int64)[keep],
                          output_tokens=cols["Response tokens"].astype(np.int64)[keep], source="burstgpt",
                          path=path, line=lines[keep], bad_lines=bad.count, notes=notes)
    if has_sessions:
        sid = cols["Session ID"].astype(str)[keep]
        elapsed = cols["Elapsed time"].astype(np.float64)[keep] if has_elapsed else None
        _sessions_from_ids(table, sid, elapsed)
    return _sorted(table)


def _sessions_from_ids(table: WorkloadTable, sid: np.ndarray, elapsed: np.ndarray | None,
                       order_key: np.ndarray | None = None) -> None:
    """Sessions from a column of session ids (empty: none); turns in time order.

    Think time of turn k = its timestamp - the previous turn's timestamp - the previous
    turn's elapsed (response) time where the trace has it, never below 0.
    """
    valid = (sid != "") & (sid != "nan") & (sid != "None")
    names, codes = np.unique(np.where(valid, sid, ""), return_inverse=True)
    codes = codes.astype(np.int64)
    if "" in names:
        empty = int(np.searchsorted(names, ""))
        codes = np.where(codes == empty, -1, codes - (codes > empty))
        names = names[names != ""]
    order = np.lexsort((table.arrival_s if order_key is None else order_key, codes))
    turn = np.zeros(len(table), dtype=np.int32)
    think = np.full(len(table), np.nan)
    arrival = table.arrival_s.copy()
    prev = -1
    k = 0
    for i in order.tolist():
        c = codes[i]
        if c < 0:
            prev = -1
            continue
        if c == prev:
            k += 1
            j = last
            gap = table.arrival_s[i] - table.arrival_s[j]
            if elapsed is not None and np.isfinite(elapsed[j]):
                gap -= elapsed[j]
            think[i] = max(gap, 0.0) if np.isfinite(gap) else np.nan  # NaN: workload.think_s applies
            arrival[i] = np.nan  # sent when the previous turn ends, plus the think time
        else:
            k = 0
        turn[i] = k
        prev, last = c, i
    table.session, table.turn, table.think_s = codes, turn, think
    table.arrival_s = arrival
    table.session_names = names.tolist()


# ---------------------------------------------------------------------------- JSON lines
def _json_lines(path: str, bad: _BadLines):
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
    path = _check_file(path)
    bad = _BadLines(path, on_bad_line)
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
        raise _empty(path)
    ts = np.asarray(ts, dtype=np.float64) / 1e3
    return _sorted(WorkloadTable(arrival_s=ts - ts.min(), input_tokens=np.asarray(ins, dtype=np.int64),
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
    path = _check_file(path)
    bad = _BadLines(path, on_bad_line)
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
        raise _empty(path)
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
        _sessions_from_ids(table, sid, None, order_key=key)
        explicit = np.asarray(thinks)
        table.think_s = np.where(~np.isnan(explicit) & (table.turn > 0), explicit, table.think_s)
    return _sorted(table)


def read_sharegpt(path, on_bad_line: str = "error") -> WorkloadTable:
    """ShareGPT JSON: each conversation a session, each human message a turn whose output
    length is the following gpt message (its text is kept; lengths are counted with the
    served model's tokenizer when prompts are built)."""
    import orjson

    path = _check_file(path)
    bad = _BadLines(path, on_bad_line)
    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        raise _empty(path)
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
        raise _empty(path, "conversations with a human turn and a reply")
    n = len(texts)
    turns = np.asarray(turns, dtype=np.int32)
    return WorkloadTable(arrival_s=np.full(n, np.nan), input_tokens=np.full(n, -1, dtype=np.int64),
                         output_tokens=np.full(n, -1, dtype=np.int64), source="sharegpt", path=path,
                         session=np.asarray(sess, dtype=np.int64), turn=turns,
                         think_s=np.full(n, np.nan), text=texts, output_text=outs_text,
                         line=np.arange(1, n + 1, dtype=np.int64), session_names=names, bad_lines=bad.count)


def read_trace(fmt: str, path, on_bad_line: str = "error", model_filter: str | None = None) -> WorkloadTable:
    if fmt == "azure":
        return read_azure(path, on_bad_line)
    if fmt == "burstgpt":
        return read_burstgpt(path, on_bad_line, model_filter)
    if fmt == "mooncake":
        return read_mooncake(path, on_bad_line)
    if fmt == "sharegpt":
        return read_sharegpt(path, on_bad_line)
    if fmt == "jsonl":
        return read_jsonl(path, on_bad_line)
    raise TraceError(f"workload={fmt}: unknown trace format (known: {', '.join(FORMATS)}, synthetic)")
