"""protocol=tune: a trial's configuration (the command's config with the knobs set, as a sweep
with ``search=slo``) and the checks of the bracket, the knobs and the trials' shared base."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from conf.schema import ConfigError, SweepProtocol, validate
from harness import results_io
from harness.errors import UserError
from harness.quality_gate import gate_enabled
from protocols.designs import design_of
from protocols.tune import plan
from protocols.tune.trials import TRIALS_DIR

BASE_FILE = "tune_base.json"
# Protocol keys that steer the search, not what a trial measures: changing them keeps the trials.
SEARCH_ONLY = ("space", "trials", "objective", "sampler", "startup_trials", "seed", "dry_run", "screen", "finalists",
               "base_experiment", "profile", "dynamo_python", "screen_requests", "confirm", "residuals")
# Keys that change how results are shown or logged, not what is measured.
PRESENTATION = ("output_dir", "resume", "mlflow", "report", "progress")


def _flat(d, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


class TrialConfigs:
    """The tune's trial configurations and their checks."""

    # ------------------------------------------------------------------------------------ checks
    def _check_bracket(self) -> None:
        p = self.cfg.protocol
        points = list(p.load_points or [])
        if not (p.search_low and p.search_high) and len(points) < 2 and not p.probe:
            raise ValueError("protocol=tune searches each trial's max load under the SLO between "
                             "protocol.search_low and protocol.search_high: give both (requests/s, or users "
                             "for load=concurrency), or protocol.load_points to take them from, or protocol.probe=true")
        if p.search_low and p.search_high and not p.search_low < p.search_high:
            raise ValueError(f"protocol.search_low={p.search_low} must be below protocol.search_high={p.search_high}")

    def _check_knobs(self) -> None:
        """Every knob names one config value, and each of its choices (or range ends) fits the
        field's type and passes the schema's checks, so no suggestion fails halfway through a
        tune; each choice also survives the round trip through Hydra's override syntax (a trial's
        params are recorded, and given to its experiment, as overrides)."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        missing = object()
        parser = OverridesParser.create()
        for k in self.knobs:
            current = OmegaConf.select(self.cfg, k.key, default=missing)
            if current is missing:
                parent = k.key.rsplit(".", 1)[0] if "." in k.key else ""
                node = OmegaConf.select(self.cfg, parent, default=None) if parent else self.cfg
                known = ", ".join(map(str, node)) if isinstance(node, DictConfig) else "none"
                raise ValueError(f"protocol.space.{k.key}: no such key in this config "
                                 f"({parent or 'the root'} has: {known})")
            if isinstance(current, (DictConfig, ListConfig)):
                raise ValueError(f"protocol.space.{k.key}: a group or mapping, not one value; a knob is a single "
                                 "setting (whole engine configs are compared with protocol=compare)")
            for want in list(k.choices) if k.choices is not None else (k.grid() if self.grid else []):
                got = parser.parse_overrides([f"{k.key}={plan.override_literal(want)}"])[0].value()
                if got != want or type(got) is not type(want):
                    raise ValueError(f"protocol.space.{k.key}: the choice {want!r} comes back from Hydra's override "
                                     f"syntax as {got!r}; rename it")
            for v in (k.choices or [k.low, k.high]):
                trial = copy.deepcopy(self.cfg)
                try:
                    OmegaConf.update(trial, k.key, v, merge=False)
                    validate(trial)
                except ConfigError as e:
                    raise ValueError(f"protocol.space.{k.key}: the value {v!r}: {e}") from None
                except OmegaConfBaseException as e:
                    raise ValueError(f"protocol.space.{k.key}: the value {v!r}: {str(e.msg).splitlines()[0]}") from None

    # ------------------------------------------------------------------------------------ configs
    def trial_config(self, cfg: DictConfig, folder: Path) -> DictConfig:
        """A job's config as a trial: the protocol becomes a sweep with ``search=slo`` (its load
        points, bracket and tolerance kept), written to ``folder``."""
        trial = copy.deepcopy(cfg)
        keep = {f.name for f in dataclasses.fields(SweepProtocol)}
        proto = {k: v for k, v in OmegaConf.to_container(cfg.protocol, resolve=True).items() if k in keep}
        proto.update(name="sweep", search="slo", dry_run=False)
        trial.protocol = OmegaConf.merge(OmegaConf.structured(SweepProtocol), proto)
        trial.output_dir = str(folder)
        if gate_enabled(cfg, design_of(cfg)):  # each trial's greedy outputs, judged against the reference's
            trial.quality.enabled = True
        return trial

    def base_fingerprint(self) -> dict:
        """What every trial shares (the config less the knobs, the search's own steering and
        presentation): trials in a folder are reused only while it is unchanged."""
        c = results_io.redact(OmegaConf.to_container(self.cfg, resolve=True))
        for k in PRESENTATION:
            c.pop(k, None)
        for k in SEARCH_ONLY:
            c["protocol"].pop(k, None)
        flat = {k: v for k, v in _flat(c).items() if k not in {kn.key for kn in self.knobs}}
        digest = hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()
        return {"sha256": digest, "config": flat}

    def with_params(self, params: dict) -> DictConfig:
        """The command's config with the knobs set to ``params`` (each checked against the schema
        for its choices and range ends before the first trial)."""
        cfg = copy.deepcopy(self.cfg)
        for key, value in params.items():
            OmegaConf.update(cfg, key, value, merge=False)
        return cfg

    def _check_base(self) -> None:
        path = self.out / BASE_FILE
        fp = self.base_fingerprint()
        trials = self.read_trials()
        if trials and not self.cfg.resume:
            raise UserError(f"resume=false, but {self.out / TRIALS_DIR} holds trials: give a new output_dir")
        if path.exists():
            old = results_io.read_json(path)
            if old["sha256"] != fp["sha256"] and trials:
                diff = sorted(k for k in set(old["config"]) | set(fp["config"])
                              if old["config"].get(k) != fp["config"].get(k))
                raise UserError(f"{self.out} holds trials of another config (differs in: {', '.join(diff[:8])}); "
                                "their results would not compare: give a new output_dir")
        results_io.write_json(path, fp)
