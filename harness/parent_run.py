"""An experiment's MLflow parent run, started the same way by every protocol: named after its
folder, the config redacted as its params, tagged with its folder and protocol, and continued
(not started again) when the same folder is run again (``mlflow_parent.txt``).  Its children,
metrics and artifacts are each protocol's own (``harness.mlflow_log``)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from harness import results_io
from harness.mlflow_log import MlflowLogger, tracking_uri

MARKER = "mlflow_parent.txt"


def start_parent(cfg: DictConfig, out: Path, *, name: str | None = None, tags: dict | None = None,
                 strict: bool = False, resume: bool = True) -> MlflowLogger | None:
    """The parent run of the experiment in ``out`` (None with ``mlflow.enabled=false``).
    ``strict=False``: MLflow unreachable, now or mid-run, is said and the run goes on
    (``tokenfactory mlflow-sync`` logs it later); a protocol that logs through the client itself
    while it runs asks for ``strict``; ``resume=False``: a new parent run even where the folder
    names one (a protocol whose rerun is a new experiment, not the same one continued)."""
    if not cfg.mlflow.enabled:
        return None
    log = MlflowLogger(tracking_uri(cfg.mlflow.tracking_uri), str(cfg.experiment), where=out, strict=strict)
    marker = out / MARKER
    prev = marker.read_text().strip() if resume and marker.exists() else None
    safe = results_io.redact(OmegaConf.to_container(cfg, resolve=True))
    pid = log.start_parent(name or out.name, safe, run_id=prev,
                           tags={"output_dir": str(out.resolve()), "tokenfactory.protocol": str(cfg.protocol.name),
                                 **track_tags(cfg), **(tags or {})})
    if pid:
        results_io.write_atomic(marker, pid + "\n")
    return log


def track_tags(cfg) -> dict:  # (a composed config, or a run folder's config.yaml as a dict)
    """The tags that put an experiment in a tracked benchmark's history (``track=NAME``,
    ``track_version``; ``protocols.track.history`` searches them)."""
    out = {}
    if cfg.get("track"):
        out["tokenfactory.track"] = str(cfg.get("track"))
    if cfg.get("track_version"):
        out["tokenfactory.track_version"] = str(cfg.get("track_version"))
    return out
