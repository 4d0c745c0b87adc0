"""protocol=tune: the quality gate: the reference's greedy outputs and each trial's against them."""

from __future__ import annotations

from pathlib import Path

from conf.compose import compose_config
from harness import quality_gate, results_io
from harness.engine_session import EngineSession
from harness.errors import UserError
from harness.quality_gate import QUALITY_FILE, gate_enabled
from protocols.designs import design_of
from protocols.tune.configs import trial_config
from protocols.tune.state import TuneState

REFERENCE_DIR = "reference"  # the quality gate's control: the config with no knob set


class TrialQuality:
    """The tune's quality gate: the reference outputs and a trial's verdict against them."""

    def __init__(self, state: TuneState):
        self.state = state

    def reference_outputs(self) -> None:
        """The quality gate's control: greedy outputs of the config without any knob (the
        engine's defaults for them), or of ``protocol.reference``'s overrides, from an engine
        launched for that alone, in ``OUT/reference/`` (once; a resumed tune reuses it).  Every
        trial's outputs are judged against them."""
        st = self.state
        folder = st.out / REFERENCE_DIR
        if not gate_enabled(st.cfg, design_of(st.cfg)) or (folder / QUALITY_FILE).exists():
            return
        ref = [str(o) for o in (st.cfg.protocol.get("reference") or [])]
        print("quality gate: greedy outputs of the reference config ("
              + (" ".join(ref) if ref else "no knob set") + ") ...", flush=True)
        try:
            cfg = compose_config(st.overrides + ref) if ref else st.cfg
        except Exception as e:  # noqa: BLE001 - Hydra's parse and compose errors, said with the key
            raise UserError(f"protocol.reference: {e}") from None
        session = EngineSession(trial_config(cfg, folder), folder, None, name=None)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            session.start()
            quality_gate.collect(session, folder)
        except UserError as e:  # e.g. a knob the engine cannot do without (the model itself)
            print(f"quality gate: the config with no knob set does not run ({e}); the first trial's outputs "
                  "are the reference", flush=True)
        finally:
            session.stop()

    def trial_quality(self, folder: Path, trials: list[dict]) -> tuple[bool | None, str | None]:
        """A trial's greedy outputs against the reference's (``quality.*`` thresholds); ``trials``:
        the tune's trials, the first with outputs the reference where the knob-less config did not run."""
        st = self.state
        ref = st.out / REFERENCE_DIR
        if not (ref / QUALITY_FILE).exists():  # no knob-less reference: the first trial with outputs
            firsts = sorted((t["trial"], st.out / t["folder"]) for t in trials
                            if (st.out / t["folder"] / QUALITY_FILE).exists())
            ref = firsts[0][1] if firsts else ref
        gate = gate_enabled(st.cfg, design_of(st.cfg))
        if not gate or not (folder / QUALITY_FILE).exists() or not (ref / QUALITY_FILE).exists():
            return None, None
        if ref == folder:
            return True, "the reference (the first trial: the config with no knob set did not run)"
        v = quality_gate.judge([(REFERENCE_DIR, 0, ref), ("trial", 0, folder)], REFERENCE_DIR,
                               st.cfg.quality)["configs"].get("trial")
        return (None, None) if v is None else (bool(v["passed"]), v["reason"])


def quality_verdict(folder: Path) -> tuple[bool | None, str | None]:
    """Whether a trial's record says the quality gate failed: ``quality_gate_passed`` in its
    experiment.json, the verdicts under its ``quality_gate``, or any of its runs' summaries
    (None: no gate verdict in the record)."""
    verdicts: list[tuple[bool, str | None]] = []
    path = folder / results_io.EXPERIMENT
    rec = results_io.read_json(path, {})
    if isinstance(rec.get("quality_gate_passed"), bool):
        verdicts.append((rec["quality_gate_passed"], rec.get("quality_gate_reason")))
    for v in ((rec.get("quality_gate") or {}).get("configs") or {}).values():
        if isinstance(v, dict) and isinstance(v.get("passed"), bool):
            verdicts.append((v["passed"], v.get("reason")))
    for s in folder.rglob(results_io.SUMMARY):
        m = results_io.read_json(s)
        if isinstance(m.get("quality_gate_passed"), bool):
            verdicts.append((m["quality_gate_passed"], m.get("quality_gate_reason")))
    if not verdicts:
        return None, None
    failed = [why for ok, why in verdicts if not ok]
    return (False, failed[0]) if failed else (True, None)
