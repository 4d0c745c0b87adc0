"""What a report reads: the runs under a folder (ours and imported ones), the experiment's
record (``experiment.json``, ``comparison.json``, ``ablation.json``) and the SLO, grouped into
series (one per config, one per imported source) and load points.

Every number comes from the runs' ``summary.json`` files; aggregates across repeats (blocks of
a comparison, repeats of a sweep) use ``metrics.statistics`` (Student-t for means, BCa
bootstrap for ratios of totals, as ``comparison.json`` does).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from conf.load_point import offered_load, run_title, split_repeat
from harness.results_io import ABLATION, COMPARISON, EXPERIMENT, RUN_META, SUMMARY, find_run_dirs, read_json
from metrics.slo import slo_holds
from metrics.statistics import mean_ci, ratio_ci

# summary key -> (numerator, denominator, scale): ratios of totals across repeats, never means of ratios
RATIOS = {"cost_per_mtok_good": ("cost_total", "good_output_tokens", 1e6),
          "cost_per_mtok_all": ("cost_total", "all_output_tokens", 1e6),
          "cost_per_mtok_good_answer": ("cost_total", "good_answer_tokens", 1e6),
          "energy_per_good_token_j": ("energy_j", "good_output_tokens", 1.0),
          "steady_energy_per_token_j": ("steady_energy_j", "steady_output_tokens", 1.0)}
# The kinds of offered load an x axis can show.
RATE, CONCURRENCY = "rate", "concurrency"


def number(v) -> float | None:
    """A summary value as a finite float, else None ("inf" strings, NaN, text, bools)."""
    if v is None or isinstance(v, (str, bool)):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@dataclass
class Run:
    """One run folder: ours (``run.json``) or imported (``source.json`` from ``harness.imports``)."""

    dir: Path
    summary: dict
    label: str
    series: str                  # what colours and legends group by: the config, or the imported source
    config: str = ""
    block: int = 0
    repeat: int = 0              # which repeat of its load point (a sweep's; a comparison's are blocks)
    repeats: int = 1
    role: str = "point"
    kind: str | None = None      # RATE | CONCURRENCY | None (a trace, or unknown)
    x: float | None = None
    load: dict = field(default_factory=dict)
    source: dict | None = None   # imported: source.json
    slo: dict = field(default_factory=dict)

    @property
    def imported(self) -> bool:
        return self.source is not None

    @property
    def title(self) -> str:
        """The run for people: its load point, and its block or repeat where it has one."""
        return f"block {self.block} · {self.label}" if self.config else run_title(self.label, self.repeat,
                                                                                     self.repeats)


@dataclass
class Est:
    """A value with its interval; ``how`` says across what (repeats, or within one run)."""

    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 1
    how: str = ""


@dataclass
class Group:
    """The runs of one series at one load point (its repeats)."""

    series: str
    label: str
    runs: list[Run]

    @property
    def x(self) -> float | None:
        xs = [r.x for r in self.runs if r.x is not None]
        return sorted(xs)[len(xs) // 2] if xs else None

    @property
    def kind(self) -> str | None:
        return self.runs[0].kind

    def values(self, key: str) -> list[float]:
        return [v for v in (number(r.summary.get(key)) for r in self.runs) if v is not None]

    def sufficient(self, key: str) -> bool:
        """Whether every run had enough samples for this percentile (MLPerf early stopping);
        ``key``: ``p90_tpot`` etc.  A run without the flag counts as sufficient."""
        return all(r.summary.get(f"{key}_sufficient", True) is not False for r in self.runs)

    def estimate(self, key: str, confidence: float = 0.95) -> Est:
        """Across repeats when there are several (ratio of totals for RATIOS); for one run, its
        value and, for a percentile, its within-run order-statistic interval."""
        if key in RATIOS and len(self.runs) > 1:
            num, den, scale = RATIOS[key]
            pairs = [(number(r.summary.get(num)), number(r.summary.get(den))) for r in self.runs]
            pairs = [(a, b) for a, b in pairs if a is not None and b]
            if len(pairs) > 1:
                e = ratio_ci([a for a, _ in pairs], [b for _, b in pairs], scale=scale, confidence=confidence)
                return Est(number(e.value), number(e.low), number(e.high), e.n, f"{e.method} over {e.n} repeats")
        vals = self.values(key)
        if not vals:
            return Est(None, n=0)
        if len(vals) > 1:
            e = mean_ci(vals, confidence)
            return Est(number(e.value), number(e.low), number(e.high), e.n, f"mean, {e.method} over {e.n} repeats")
        s = self.runs[0].summary
        lo, hi = number(s.get(f"{key}_ci95_low")), number(s.get(f"{key}_ci95_high"))
        return Est(vals[0], lo, hi, 1, "order-statistic 95% interval within the run" if lo is not None else "")


@dataclass
class ReportData:
    """Everything one report shows."""

    root: Path
    runs: list[Run]
    experiment: dict = field(default_factory=dict)
    comparison: dict = field(default_factory=dict)
    ablation: dict = field(default_factory=dict)

    @cached_property
    def ours(self) -> list[Run]:
        return [r for r in self.runs if not r.imported]

    @cached_property
    def imported(self) -> list[Run]:
        return [r for r in self.runs if r.imported]

    @cached_property
    def series(self) -> list[str]:
        """Series in display order: the experiment's configs (baseline first), then the rest."""
        names = []
        base = self.experiment.get("baseline")
        if base:
            names.append(base)
        names += [c for c in (self.experiment.get("configs") or {}) if c]
        names += [r.series for r in self.ours] + [r.series for r in self.imported]
        return list(dict.fromkeys(n for n in names if any(r.series == n for r in self.runs)))

    @cached_property
    def slo(self) -> dict:
        """The SLO every run was held to (the experiment's, else the first run's)."""
        if self.experiment.get("slo"):
            return self.experiment["slo"]
        return next((r.slo for r in self.ours if r.slo), {})

    @cached_property
    def x_kind(self) -> str | None:
        """The kind of offered load the vs-load figures show: that of most of our runs."""
        kinds = [r.kind for r in (self.ours or self.runs) if r.kind]
        return max(set(kinds), key=kinds.count) if kinds else None

    def run_key(self, run: Run) -> str:
        """The run's folder relative to the report's root (an imported one: its own path), as the
        page's cells name it."""
        try:
            return str(run.dir.relative_to(self.root))
        except ValueError:
            return str(run.dir)

    def groups(self, series: str | None = None, role: str = "point") -> list[Group]:
        """Runs grouped by (series, load point label), in order of offered load."""
        by: dict[tuple[str, str], list[Run]] = {}
        for r in self.runs:
            if r.role == role and (series is None or r.series == series):
                by.setdefault((r.series, r.label), []).append(r)
        gs = [Group(s, lab, rs) for (s, lab), rs in by.items()]
        gs.sort(key=lambda g: (self.series.index(g.series) if g.series in self.series else 99,
                               g.x is None, g.x or 0.0))
        return gs

    def on_axis(self, series: str) -> list[Group]:
        """The series' load points that the vs-load figures can place (the main kind of load)."""
        return [g for g in self.groups(series) if g.x is not None and g.kind == self.x_kind]

    @cached_property
    def off_axis(self) -> list[str]:
        """Series with load points of another kind (or none): left out of the vs-load figures."""
        return [s for s in self.series if any(g.kind != self.x_kind or g.x is None for g in self.groups(s))]

    def max_load_meeting_slo(self, series: str) -> Group | None:
        """The highest load point at which every repeat met the SLO (``metrics.slo.slo_holds``)."""
        best = None
        min_att = number(self.slo.get("min_attainment"))
        for g in self.on_axis(series):
            ok = [slo_holds(r.summary, min_att)[0] for r in g.runs]
            if ok and all(ok):
                best = g
        return best

def _load_kind(load: dict) -> str | None:
    kind = load.get("kind")
    if kind == "concurrency":
        return CONCURRENCY
    return RATE if load.get("rate") is not None else None


def imported_load(summary: dict, source: dict) -> tuple[str | None, float | None, str]:
    """The offered load of an imported run, as its tool recorded it: (kind, x, words)."""
    m = summary.get("source_metrics") or {}
    tool = source.get("source_tool") or summary.get("source_tool") or ""
    if tool.startswith("vllm"):
        rate = number(m.get("request_rate"))
        if rate is not None:
            return RATE, rate, f"request rate {rate:g}/s"
        if number(m.get("max_concurrency")) is not None:
            c = number(m["max_concurrency"])
            return CONCURRENCY, c, f"max concurrency {c:g} (request rate {m.get('request_rate')})"
    if tool == "guidellm":
        strat = (m.get("config") or {}).get("strategy") or {}
        typ = strat.get("type_") or strat.get("type")
        if typ == "concurrent" and number(strat.get("streams")) is not None:
            return CONCURRENCY, number(strat["streams"]), f"concurrent, {strat['streams']} streams"
        if typ == "synchronous":
            return CONCURRENCY, 1.0, "synchronous (one stream)"
        if number(strat.get("rate")) is not None:
            return RATE, number(strat["rate"]), f"{typ} at {strat['rate']}/s"
    if tool == "aiperf":
        lg = ((m.get("input_config") or {}).get("loadgen")) or {}
        if number(lg.get("request_rate")) is not None:
            return RATE, number(lg["request_rate"]), f"request rate {lg['request_rate']}/s"
        if number(lg.get("concurrency")) is not None:
            return CONCURRENCY, number(lg["concurrency"]), f"concurrency {lg['concurrency']}"
    return None, None, "offered load not recorded in the file"


def _imported_series(summary: dict, source: dict, d: Path) -> str:
    tool = source.get("source_tool") or summary.get("source_tool") or "imported"
    file = Path(str(source.get("source_file") or d.name)).name
    return f"{tool}: {file} (imported)"


def read_run(d: Path) -> Run:
    """One complete run folder."""
    summary = read_json(d / SUMMARY)
    if (d / "source.json").exists() or summary.get("source_tool"):
        source = read_json(d / "source.json", {})
        kind, x, words = imported_load(summary, source)
        if not summary.get("num_requests") and summary.get("source_equivalents"):
            # an aggregate-only file (no per-request records): the tool's own numbers, where its
            # definitions are ours (harness.imports put them under our names)
            summary = {**summary, **summary["source_equivalents"]}
            source = {**source, "aggregates_only": True}
        bench = summary.get("source_benchmark") or source.get("source_benchmark")
        label = f"{words}" + (f" ({bench})" if bench else "")
        return Run(d, summary, label, _imported_series(summary, source, d), kind=kind, x=x,
                   source={**source, "load_words": words})
    meta = read_json(d / RUN_META, {})
    load = meta.get("load") or {}
    fixed = meta.get("fixed_conditions") or {}
    config = str(meta.get("config") or "")
    # a load point's label is the same for each of its repeats; older folders said "<point> #<r>"
    label, old_repeat = split_repeat(str(meta.get("label", d.name)))
    repeats = int(meta.get("repeats") or (2 if old_repeat is not None else 1))
    return Run(d, summary, label, config, config=config, block=int(meta.get("block") or 0),
               repeat=int(meta.get("repeat") or old_repeat or 0), repeats=repeats,
               role=str(meta.get("role") or "point"), kind=_load_kind(load), x=offered_load(load) if load else None,
               load=load, slo=fixed.get("slo") or {})


def _experiment_home(d: Path, root: Path) -> Path | None:
    """The folder of the experiment a run belongs to: the nearest one, from the run's own folder
    up to ``root``, that holds ``experiment.json``."""
    try:
        depth = len(d.relative_to(root).parts)
    except ValueError:
        return None
    for p in [d, *d.parents][:depth + 1]:
        if (p / EXPERIMENT).exists():
            return p
    return None


_STAMP = re.compile(r"(\d{4})(\d\d)(\d\d)-(\d\d)(\d\d)(\d\d)-[0-9a-f]+")  # results_io's output folders
_JOB = re.compile(r"job\d+-(.+)")                                            # a multirun job: its overrides


def _folder_words(f: Path, root: Path) -> str:
    """What tells apart experiments of one name: a multirun job's overrides, else the time in an
    output folder's name, else the folder."""
    m = _JOB.fullmatch(f.name)
    if m:
        return m.group(1)
    m = _STAMP.fullmatch(f.name)
    if m:
        y, mo, d, h, mi, sec = m.groups()
        return f"{y}-{mo}-{d} {h}:{mi}:{sec}"
    return str(f.relative_to(root)) if f != root else f.name


def name_series(root: Path, runs: list[Run]) -> None:
    """Series are named by config; a sweep's one unnamed config by its experiment; and when the
    runs come from several experiments, by experiment (and config): never by a run's folder."""
    ours = [r for r in runs if not r.imported]
    homes = {r.dir: _experiment_home(r.dir, root) for r in ours}
    folders = sorted({h for h in homes.values() if h is not None})
    names = {f: str(read_json(f / EXPERIMENT).get("experiment") or f.name) for f in folders}
    seen = Counter(names.values())
    for f in folders:
        if seen[names[f]] > 1:
            names[f] = f"{names[f]} ({_folder_words(f, root)})"
    several = len(folders) > 1
    for r in ours:
        exp = names.get(homes[r.dir])
        if several and exp is not None:
            r.series = f"{exp}: {r.config}" if r.config else exp
        elif not r.series:
            r.series = exp or root.name or "runs"


def _json_or_empty(path: Path) -> dict:
    return read_json(path, {})


def load(root, extra: list | tuple = ()) -> ReportData:
    """The report's data: runs under ``root`` and under every folder of ``extra`` (imported
    results written by ``harness.imports``); the experiment's record files at ``root``."""
    root = Path(root)
    runs = [read_run(d) for d in find_run_dirs(root)]
    for e in extra:
        runs += [read_run(d) for d in find_run_dirs(e)]
    if not runs:
        raise ValueError(f"{root}: no complete run (no summary.json) to report on")
    name_series(root, runs)
    return ReportData(root, runs, _json_or_empty(root / EXPERIMENT), _json_or_empty(root / COMPARISON),
                      _json_or_empty(root / ABLATION))


def load_points(root) -> list[dict]:
    """Our complete runs under ``root`` as dicts (dir, label, load, x, summary, config, block),
    ordered by offered load."""
    points = []
    for d in find_run_dirs(Path(root)):
        r = read_run(d)
        points.append({"dir": r.dir, "label": r.label, "load": r.load, "x": r.x, "summary": r.summary,
                       "config": r.config, "block": r.block})
    points.sort(key=lambda p: (p["x"] is None, p["x"] or 0.0))
    return points
