"""protocol=track (``tokenfactory track NAME``, ``tokenfactory run protocol=track
protocol.track=NAME``): read the history, compare the newest with its baseline, print both,
write the record (``track.json``, ``protocols.track.record``) and draw the page; with
``protocol.gate`` the gate's verdict is the exit code (``gate_code``)."""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conf.schema import ConfigError, TrackProtocol, typed, validate
from harness.errors import UserError
from harness.lifecycle import Ending, Lifecycle, run_lifecycle
from harness.mlflow_log import MlflowLogger
from harness.report.source import safe_part
from harness.report.track import write_track_page
from metrics.answer import gate_answer
from protocols.track.history import load_history
from protocols.track.record import TRACK_FILE, track_record, write_track_record
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


def track_options(cfg: DictConfig) -> TrackProtocol:
    """``cfg.protocol`` as the typed ``TrackProtocol``, checked (ranges, choices) and converted
    once; UserError naming the key for a bad or missing value."""
    if OmegaConf.is_missing(cfg.protocol, "track"):
        raise UserError("protocol.track: which tracked benchmark? (tokenfactory track NAME, or "
                        "tokenfactory run protocol=track protocol.track=NAME; track=NAME is what an experiment "
                        "sets to join a track)")
    try:
        validate(cfg.protocol, "protocol")
    except ConfigError as e:
        raise UserError(str(e)) from e
    return typed(cfg.protocol, TrackProtocol)


def track_folder(cfg: DictConfig, options: TrackProtocol) -> Path:
    """Where track.json and track.html go: output_dir, else results/track/NAME."""
    return Path(cfg.output_dir) if cfg.get("output_dir") else Path("results") / "track" / safe_part(options.track)


def run_track_protocol(cfg: DictConfig) -> Path:
    """The registry's entry: judge, write, and with ``protocol.gate`` exit with the gate's code
    (SystemExit 1 or 3, its message on stderr) when it does not pass."""
    options = track_options(cfg)
    out = track_folder(cfg, options)
    steps = TrackRun(options, out, cfg.mlflow.tracking_uri)
    run_lifecycle(cfg, out, steps, options=Lifecycle(parent=None, resume_hint=None))
    code = gate_code(steps.doc)
    if options.gate and code != PASSED:
        print(steps.doc["gate_message"], file=sys.stderr, flush=True)
        raise SystemExit(code)
    return out


class TrackRun:
    """The track's steps on the run lifecycle (``harness.lifecycle``): no parent run (it reads the
    history's), no experiment.json; its record is track.json (``protocols.track.record``)."""

    def __init__(self, options: TrackProtocol, out: Path, tracking_uri: str | None):
        self.options, self.out, self.tracking_uri = options, out, tracking_uri
        self.doc: dict = {}

    def run_steps(self, parent: MlflowLogger | None) -> None:
        try:
            self.doc = run_track(self.options, self.out, self.tracking_uri)
        except ValueError as e:  # no such track or baseline, conditions that differ: the user's to fix
            raise UserError(str(e)) from e

    def record_as(self, status: str) -> None:
        return None

    def ending(self, status: str) -> Ending:
        """track.json with the gate's answer."""
        answer = gate_answer(self.doc["comparison"], self.options.track)
        self.doc["answer"] = answer.to_dict()
        write_track_record(self.out, self.doc)
        print(f"{TRACK_FILE} and track.html written: {self.out.resolve()}", flush=True)
        return Ending(answer={"answer": self.doc["answer"]})


def run_track(options: TrackProtocol, out: Path, tracking_uri: str | None = None, log=print) -> dict:
    """The history of ``options.track``, the newest (or ``options.at``) against its baseline,
    printed and drawn (track.html in ``out``); returns the record (``track.json``)."""
    entries = load_history(options.track, tracking_uri, cache=out / "runs", log=log)
    if options.at is not None:  # the history as it stood when that experiment was the newest
        entries = entries[:position(entries, options.at) + 1]
    metrics = list(options.metrics) or default_metrics([e.runs for e in entries])
    allow = {k.strip() for k in options.allow if k.strip()}
    hist = history(entries, metrics, options.confidence, options.margin, options.adjust)
    result = (compare_newest(entries, options.baseline, metrics, options.confidence, options.margin, allow,
                             options.adjust, options.keep_rejected)
              if len(entries) > 1 else None)
    log(format_history(hist, metrics))
    if result:
        log(format_result(result))
    else:
        log(f"track {options.track}: one experiment so far; nothing to compare it with")
    write_track_page(out, options.track, hist, result, metrics)
    return track_record(options, metrics, hist, result, gate_message(result) if result else "")


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
