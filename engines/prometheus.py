"""The Prometheus text exposition format (version 0.0.4), as engines serve it on ``/metrics``.

Only what a scrape needs: one ``Sample`` per line that carries a value, with its labels,
plus the ``# TYPE`` of each family.  Histogram and summary series keep their suffixed
names (``_bucket``, ``_sum``, ``_count``); a counter's series keeps its ``_total``.
A malformed line is an error naming its line number, never a silently skipped value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class ExpositionError(ValueError):
    """A metrics page that does not follow the text exposition format."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict = field(default_factory=dict, hash=False, compare=True)
    value: float = math.nan


def _value(text: str, lineno: int) -> float:
    t = text.strip()
    low = t.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    try:
        return float(t)
    except ValueError:
        raise ExpositionError(f"metrics line {lineno}: bad value {text!r}") from None


def _labels(line: str, i: int, lineno: int) -> tuple[dict, int]:
    """Parse ``{a="x",b="y"}`` starting at ``line[i] == '{'``; return (labels, index after '}')."""
    labels: dict[str, str] = {}
    i += 1
    n = len(line)
    while True:
        while i < n and line[i] in " \t,":
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        m = _LABEL_NAME.match(line, i)
        if not m:
            raise ExpositionError(f"metrics line {lineno}: bad label name at column {i + 1}: {line!r}")
        key = m.group(0)
        i = m.end()
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != "=" or i + 1 >= n or line[i + 1] != '"':
            raise ExpositionError(f"metrics line {lineno}: expected =\"...\" after label {key!r}: {line!r}")
        i += 2
        out = []
        while True:
            if i >= n:
                raise ExpositionError(f"metrics line {lineno}: unterminated label value for {key!r}")
            c = line[i]
            if c == "\\" and i + 1 < n:
                out.append(_ESCAPES.get(line[i + 1], "\\" + line[i + 1]))
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                out.append(c)
                i += 1
        labels[key] = "".join(out)


def parse(text: str) -> tuple[list[Sample], dict[str, str]]:
    """All samples of a metrics page, and ``{family: type}`` from its ``# TYPE`` lines."""
    samples: list[Sample] = []
    types: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        m = _NAME.match(line)
        if not m:
            raise ExpositionError(f"metrics line {lineno}: bad metric name: {raw!r}")
        name = m.group(0)
        i = m.end()
        labels: dict = {}
        if i < len(line) and line[i] == "{":
            labels, i = _labels(line, i, lineno)
        rest = line[i:].split()
        if not rest:
            raise ExpositionError(f"metrics line {lineno}: no value: {raw!r}")
        # rest[1], when present, is a timestamp in ms; the scrape time is ours to record.
        samples.append(Sample(name, labels, _value(rest[0], lineno)))
    return samples, types


def common_values(text: str, metric_map: dict) -> dict[str, float]:
    """An engine's page under common names: ``metric_map`` is common name -> (series, labels it
    must carry or None); each value is summed over ranks and label values, and a series the
    page lacks is left out."""
    samples, _ = parse(text)
    out = {}
    for common, (series, where) in metric_map.items():
        v = total(samples, series, where)
        if v is not None:
            out[common] = v
    return out


def total(samples: list[Sample], name: str, where: dict | None = None) -> float | None:
    """Sum of every series named ``name`` (over labels: ranks, models, sources), optionally
    only those whose labels include ``where``; None when the page has no such series."""
    vals = [s.value for s in samples
            if s.name == name and (not where or all(s.labels.get(k) == v for k, v in where.items()))]
    return float(sum(vals)) if vals else None


def summed(pages) -> dict[str, float]:
    """Several pages' values under common names (``common_values`` of each: replicas, workers)
    summed name by name; a name no page has is left out."""
    out: dict[str, float] = {}
    for values in pages:
        for k, v in values.items():
            out[k] = out.get(k, 0.0) + v
    return out
