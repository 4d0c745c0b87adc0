"""protocol=NAME -> its protocol: the one place a protocol is found by name.

Every protocol is run the same way (``run_protocol``): the command line composes the config
and hands it here with what the user typed (``Invocation``); the protocol's ``run`` does the
rest and returns the experiment's folder.  Each protocol carries its design
(``protocols.designs``: configs in blocks or one, baseline, quality gate), which the machinery
below reads by the same name, and, for those run as an ``Experiment`` (sweep, compare,
ablation), its records (each protocol's ``record`` module: what it writes beside
experiment.json and runs.parquet).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from harness.errors import UserError
from harness.experiment_record import ProtocolRecord
from protocols.ablation.record import ABLATION_RECORD
from protocols.compare.record import COMPARISON_RECORD, compare_experiments
from protocols.designs import DESIGNS, Design
from protocols.experiment import Experiment
from protocols.plan.run import run_plan
from protocols.profile.run import run_profile
from protocols.promote.run import run_promotion
from protocols.sweep.record import SWEEP_RECORD
from protocols.track.run import run_track_protocol
from protocols.tune.run import Tuner


@dataclass(frozen=True)
class Invocation:
    """What the command line knows beyond the config: the overrides as typed, the keys among
    them (``conf.overrides.explicit_keys``) and those a Hydra multirun sweeps."""
    overrides: list[str] = field(default_factory=list)
    explicit: frozenset[str] = frozenset()
    swept_keys: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Protocol:
    name: str
    what: str                                        # one line, for the help and errors
    run: Callable[[DictConfig, Invocation], Path]    # config -> the experiment's folder
    # what an Experiment of this protocol writes beside experiment.json and runs.parquet
    records: tuple[ProtocolRecord, ...] = ()
    # the protocol's verdict over experiments already run, each on its own (``tokenfactory compare``);
    # None: it has none
    of_finished: Callable[..., dict] | None = None

    @property
    def design(self) -> Design:
        return DESIGNS[self.name]


def protocol_experiment(cfg: DictConfig, swept_keys: frozenset[str] = frozenset(),
                        explicit: frozenset[str] = frozenset(), overrides: list[str] | None = None) -> Experiment:
    """The experiment of the config's protocol (a sweep, comparison or ablation), with its records."""
    return Experiment(cfg, swept_keys, explicit, overrides, records=get_protocol(str(cfg.protocol.name)).records)


def _experiment(cfg: DictConfig, inv: Invocation) -> Path:
    return protocol_experiment(cfg, inv.swept_keys, inv.explicit, inv.overrides).run()


def _promotion(cfg: DictConfig, inv: Invocation) -> Path:
    return run_promotion(cfg, inv.overrides)


def _plan(cfg: DictConfig, inv: Invocation) -> Path:
    if inv.swept_keys:
        raise UserError("protocol=plan simulates its candidates side by side (protocol.slos, protocol.variants); "
                        f"drop -m (it sweeps {', '.join(sorted(inv.swept_keys))})")
    return run_plan(cfg, inv.overrides, inv.explicit)


def _profile(cfg: DictConfig, inv: Invocation) -> Path:
    if inv.swept_keys:
        raise UserError("protocol=profile runs its ladders on one engine; drop -m (it sweeps "
                        f"{', '.join(sorted(inv.swept_keys))}) and profile each engine config on its own")
    return run_profile(cfg, inv.overrides)


def _tune(cfg: DictConfig, inv: Invocation) -> Path:
    if inv.swept_keys:
        raise UserError("protocol=tune suggests its own configs (an Optuna study over protocol.space), one trial at "
                        f"a time; drop -m (it sweeps {', '.join(sorted(inv.swept_keys))})")
    return Tuner(cfg, inv.overrides).run()


def _track(cfg: DictConfig, inv: Invocation) -> Path:
    if inv.swept_keys:
        raise UserError("protocol=track judges one track's newest experiment; drop -m (it sweeps "
                        f"{', '.join(sorted(inv.swept_keys))}) and run one command a track")
    return run_track_protocol(cfg)


PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (
    Protocol("sweep", "one config over its load points, repeated", _experiment, (SWEEP_RECORD,)),
    Protocol("compare", "several configs in randomised blocks, compared at equal SLO", _experiment,
             (COMPARISON_RECORD,), of_finished=compare_experiments),
    Protocol("ablation", "a baseline and its optimisations one at a time and together", _experiment,
             (COMPARISON_RECORD, ABLATION_RECORD)),
    Protocol("tune", "an Optuna study over protocol.space for the cheapest config that meets the SLO", _tune),
    Protocol("promote", "a candidate behind the proxy: shadow, canary stages, gates, rollback", _promotion),
    Protocol("plan", "a fleet sized and priced for a traffic source from finished experiments' capacity", _plan),
    Protocol("profile", "an engine's prefill time against prompt length and decode step time against batch and "
             "context (the plan's and the mocker's timing)", _profile),
    Protocol("track", "a tracked benchmark's newest experiment against its baseline; a regression gate", _track),
)}
assert set(PROTOCOLS) == set(DESIGNS), "every protocol has a design, and every design a protocol"


def get_protocol(name: str) -> Protocol:
    p = PROTOCOLS.get(name)
    if p is None:
        raise UserError(f"protocol={name!r} is not a known protocol (known: {', '.join(PROTOCOLS)})")
    return p


def run_protocol(cfg: DictConfig, inv: Invocation) -> Path:
    return get_protocol(str(cfg.protocol.name)).run(cfg, inv)
