"""protocol=tune: MLflow: the tune's parent run and each trial's run as its child."""

from __future__ import annotations

import math
from pathlib import Path

from harness.parent_run import start_parent


class TuneMlflow:
    """The tune's MLflow parent and children."""

    # ------------------------------------------------------------------------------------ MLflow
    def start_mlflow(self) -> None:
        """A parent run for the tune; each trial's own parent run becomes its child."""
        self.mlflow = start_parent(self.cfg, self.out, name=f"tune {self.out.name}", tags={"tokenfactory.kind": "tune"},
                                   strict=True)

    def _mlflow_child(self, folder: Path, number: int, params: dict, verdict: dict) -> None:
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

        marker = folder / "mlflow_parent.txt"
        if not marker.exists():
            return
        rid = marker.read_text().strip()
        client = self.mlflow.client
        client.set_tag(rid, MLFLOW_PARENT_RUN_ID, self.mlflow.parent_id)
        client.set_tag(rid, MLFLOW_RUN_NAME, f"trial {number}")
        client.set_tag(rid, "tokenfactory.kind", "tune_trial")
        client.set_tag(rid, "tune.feasible", str(verdict["feasible"]))
        if verdict["why"]:
            client.set_tag(rid, "tune.why", str(verdict["why"])[:5000])
        for k, v in params.items():
            client.set_tag(rid, f"tune.param.{k}"[:250], str(v))
        for k in ("objective", "max_load_under_slo", "cost_per_mtok_good", "goodput_rps", "goodput_per_dollar"):
            v = verdict.get(k)
            if isinstance(v, (int, float)) and math.isfinite(v):
                client.log_metric(rid, f"tune.{k}", float(v))
