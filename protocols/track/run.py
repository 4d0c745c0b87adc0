"""``tokenfactory track``'s work: read the history, compare the newest with its baseline, print
both, draw the page; returns the record (``track.json``)."""

from __future__ import annotations

from pathlib import Path

from protocols.track.history import load_history
from protocols.track.page import write_track_page
from protocols.track.verdicts import compare_newest, default_metrics, gate_message, history, position


def run_track(name: str, out: Path, baseline: str = "previous", metrics: list[str] | None = None,
              margin: float = 0.02, confidence: float = 0.95, allow: set[str] = frozenset(),
              tracking_uri: str | None = None, adjust: str = "none", at: str | None = None, log=print) -> dict:
    if not 0 < confidence < 1:
        raise ValueError(f"--confidence {confidence}: expected a level in (0, 1)")
    if not 0 <= margin < 1:
        raise ValueError(f"--margin {margin}: expected a share in [0, 1)")
    entries = load_history(name, tracking_uri, cache=out / "runs", log=log)
    if at is not None:  # the history as it stood when that experiment was the newest
        entries = entries[:position(entries, at) + 1]
    metrics = metrics or default_metrics([e.runs for e in entries])
    hist = history(entries, metrics, confidence, margin, adjust)
    result = compare_newest(entries, baseline, metrics, confidence, margin, allow, adjust) if len(entries) > 1 else None
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
                     f"{c['relative'] * 100:+.1f} % [{c['low'] * 100:+.1f} %, {c['high'] * 100:+.1f} %]")
    return "\n".join(lines)


def format_result(result: dict) -> str:
    base = ", ".join(f"{b['version']} ({b['name']})" for b in result["baseline"])
    lines = [f"newest {result['newest']['version']} ({result['newest']['name']}) against {base} "
             f"[{result['baseline_spec']}], unpaired, differences at {result['difference_confidence']:.2%}"
             f"{' (bonferroni)' if result['adjust'] == 'bonferroni' else ''}, margin ±{result['margin']:.0%}:"]
    for f in result["findings"]:
        rel = "n/a" if f["relative"] is None else f"{f['relative'] * 100:+.1f} %"
        iv = "" if f["low"] is None else f" [{f['low'] * 100:+.1f} %, {f['high'] * 100:+.1f} %]"
        lines.append(f"  {f['label']} {f['metric']}: {f['outcome']} ({rel}{iv})")
    return "\n".join(lines)
