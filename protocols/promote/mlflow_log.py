"""protocol=promote: MLflow: the gates' numbers per look and the decisions on the parent run."""

from __future__ import annotations

import math
import time

from harness.parent_run import start_parent
from protocols.promote.stages import _Stage


class PromotionMlflow:
    """The promotion's MLflow parent run."""

    # ------------------------------------------------------------------------------------ MLflow
    def start_mlflow(self) -> None:
        self.mlflow = start_parent(self.cfg, self.out, tags={"tokenfactory.kind": "promotion"}, strict=True,
                                   resume=False)

    def log_gate(self, st: _Stage, gate: dict) -> None:
        if self.mlflow is None:
            return
        from mlflow.entities import Metric, RunTag

        ts = int(time.time() * 1000)
        step = self.looks
        ms = [Metric("gate.stage_index", float(st.index), ts, step), Metric("gate.t_s", gate["t_s"], ts, step),
              Metric("gate.advance", float(gate["outcome"] == "advance"), ts, step)]
        for name, v in gate["metrics"].items():
            for k in ("incumbent", "candidate", "difference", "low", "high"):
                x = v.get(k)
                if isinstance(x, (int, float)) and math.isfinite(x):
                    ms.append(Metric(f"gate.{name}.{k}", float(x), ts, step))
        a = gate.get("agreement") or {}
        for k in ("mean_agreement", "low", "high"):
            x = a.get(k)
            if isinstance(x, (int, float)) and math.isfinite(x):
                ms.append(Metric(f"gate.token_agreement.{k}", float(x), ts, step))
        self.mlflow.client.log_batch(self.mlflow.parent_id, metrics=ms, tags=[RunTag(
            f"gate.{step:02d}", f"{st.plan.name} look {gate['look']}: {gate['outcome']}: "
                                f"{'; '.join(gate['reasons'])}"[:5000])])

    def log_decisions(self, rec: dict) -> None:
        """The outcome and each decision as tags of the parent run (its metrics, files and end:
        ``harness.finish``)."""
        if self.mlflow is None:
            return
        from mlflow.entities import RunTag

        tags = [RunTag("promotion.outcome", rec["outcome"])]
        tags += [RunTag(f"decision.{i:02d}", f"{d['t_s']:.1f}s {d['stage']} {d['action']}: {d['reason']}"[:5000])
                 for i, d in enumerate(rec["decisions"])]
        self.mlflow.client.log_batch(self.mlflow.parent_id, tags=tags)
