"""``tokenfactory track``'s work: read the history, compare the newest with its baseline, print
both, draw the page; returns the record (``track.json``)."""

from __future__ import annotations

from pathlib import Path

from harness.report.track import write_track_page
from protocols.track.history import load_history
from protocols.track.verdicts import (
    CANNOT_JUDGE,
    compare_newest,
    default_metrics,
    gate_message,
    history,
    position,
    size,
)

# tokenfactory track --gate's exit codes (harness/commands/track.py, docs/commands/track.md)
PASSED, REGRESSED, ERROR, CANNOT = 0, 1, 2, 3


def gate_code(doc: dict) -> int:
    """The gate's exit code for a ``track.json`` record: 1 when a metric regressed, else 3 when
    one the baseline has could not be judged on the newest (or it has no point runs), else 0;
    a track of one experiment passes (nothing to compare it with)."""
    c = doc["comparison"]
    if not c:
        return PASSED
    if c["regressions"]:
        return REGRESSED
    if c["unjudged"] or not c["newest_runs"]:
        return CANNOT
    return PASSED


def run_track(name: str, out: Path, baseline: str = "previous", metrics: list[str] | None = None,
              margin: float = 0.02, confidence: float = 0.95, allow: set[str] = frozenset(),
              tracking_uri: str | None = None, adjust: str = "bonferroni", at: str | None = None,
              keep_rejected: bool = False, log=print) -> dict:
    if not 0 < confidence < 1:
        raise ValueError(f"--confidence {confidence}: expected a level in (0, 1)")
    if not 0 <= margin < 1:
        raise ValueError(f"--margin {margin}: expected a share in [0, 1)")
    entries = load_history(name, tracking_uri, cache=out / "runs", log=log)
    if at is not None:  # the history as it stood when that experiment was the newest
        entries = entries[:position(entries, at) + 1]
    metrics = metrics or default_metrics([e.runs for e in entries])
    hist = history(entries, metrics, confidence, margin, adjust)
    result = (compare_newest(entries, baseline, metrics, confidence, margin, allow, adjust, keep_rejected)
              if len(entries) > 1 else None)
    log(format_history(hist, metrics))
    if result:
        log(format_result(result))
    else:
        log(f"track {name}: one experiment so far; nothing to compare it with")
    write_track_page(out, name, hist, result, metrics)
    return {"track": name, "metrics": metrics, "history": hist, "comparison": result,
            "gate_message": gate_message(result) if result else ""}


def format_history(hist: dict, metrics: list[str]) -> str:
    lines = ["history (oldest first; estimate [interval] over each experiment's repeats):"]
    for i, (e, est) in enumerate(zip(hist["experiments"], hist["per_experiment"])):
        lines.append(f"  {i + 1}. {e['version']}  {e['name']}  {e['started'][:16].replace('T', ' ')} UTC"
                     + (f"  harness {e['harness_commit'][:12]}" if e.get("harness_commit") else ""))
        for lab, ms in est.items():
            cells = []
            for m in metrics:
                v = ms.get(m) or {}
                if v.get("value") is None:
                    continue
                iv = f" [{v['low']:.4g}, {v['high']:.4g}]" if v.get("low") is not None else ""
                cells.append(f"{m} {v['value']:.4g}{iv}")
            lines.append(f"       {lab}: " + "; ".join(cells))
    for c in hist["changes"]:
        lines.append(f"  change at {c['index'] + 1}: {c['metric']} ({c['label']}) {c['outcome']} "
                     + size(c))
    return "\n".join(lines)


def format_result(result: dict) -> str:
    base = ", ".join(f"{b['version']} ({b['name']})" for b in result["baseline"])
    if result["adjust"] == "bonferroni" and result["family"] > 1:
        level = (f"differences at {result['difference_confidence']:.2%} each: Bonferroni over the {result['family']} "
                 f"verdicts (metrics x load points), {result['confidence']:.0%} for all of them together")
    else:
        level = (f"differences at {result['difference_confidence']:.0%} each, no correction over the "
                 f"{result['family']} verdicts")
    reps = result["replicates"]
    if len(set(reps.values())) == 1:
        how = "engine launches on both sides" if "launches" in reps.values() else \
            "repeats of one launch on both sides (the spread between launches is not in the intervals)"
    else:
        how = "; ".join(f"{side}: {'engine launches' if kind == 'launches' else 'repeats of one launch'}"
                        for side, kind in reps.items())
    lines = [f"newest {result['newest']['version']} ({result['newest']['name']}) against {base} "
             f"[{result['baseline_spec']}], unpaired, {level}, margin ±{result['margin']:.0%} "
             f"(±{result['margin'] * 100:.3g} points for a rate where a side is 0); replicates: {how}"]
    if result.get("rejected"):
        lines.append("  left out of the window, rejected by the gate: " + ", ".join(
            f"{e['version']} ({e['name']})" for e in result["rejected"]) + " (--keep-rejected pools them)")
    for f in result["findings"]:
        extra = f": {f['reason']}" if f["outcome"] == CANNOT_JUDGE else ""
        shown = "n/a" if f["relative"] is None else size(f)
        lines.append(f"  {f['label']} {f['metric']}: {f['outcome']} ({shown}){extra}")
    return "\n".join(lines)
