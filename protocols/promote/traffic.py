"""protocol=promote: the traffic: tokenfactory's load generator through the proxy, in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from harness.errors import UserError
from harness.proxy.routing import INCUMBENT

# Overrides that are the promotion's own, not the traffic's.
OWN = ("protocol", "proxy", "engine", "output_dir", "experiment", "mlflow", "report", "hydra", "resume")
# ... but these engine keys word the traffic's requests and go with it.
TRAFFIC_ENGINE = ("engine.request_extra", "engine.api", "engine.max_model_len", "engine.exact_output",
                  "engine.continuous_usage", "engine.api_key_env")



def override_key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def traffic_overrides(overrides: list[str]) -> list[str]:
    """The command's overrides that shape the traffic (workload, load, SLO, client, request wording)."""
    out = []
    for o in overrides:
        k = override_key(o)
        if k.startswith(TRAFFIC_ENGINE) or not k.startswith(OWN):
            out.append(o)
    return out


class Traffic:
    """The promotion's load-generator traffic."""

    def start_traffic(self) -> None:
        cfg = self.cfg
        if INCUMBENT in self.engines:
            eng = self.engines[INCUMBENT]
            model, tok = eng.served_model, eng.tokenizer
        else:
            model = cfg.engine.get("served_model_name") or cfg.engine.get("model")
            tok = cfg.engine.get("tokenizer") or model
        if not model:
            raise UserError("engine.model: the served model's name for the traffic through the proxy "
                            "(and engine.tokenizer to build its prompts), or protocol.incumbent=[...] to launch it")
        extra = traffic_overrides(self.overrides)
        keys = {override_key(o) for o in extra}
        if "load.stop_when_saturated" not in keys:  # a promotion's traffic is not a saturation probe
            extra.append("load.stop_when_saturated=false")
        if cfg.load.kind != "trace" and not keys & {"load.duration_s", "load.num_requests"}:
            total = sum(s.max_duration_s for s in self.stages) + float(cfg.protocol.after_s)
            extra += [f"load.duration_s={total:g}", "load.num_requests=null"]
            print(f"note: traffic for up to {total:g} s (the stages' max_duration_s and protocol.after_s); "
                  "give load.duration_s to change it", flush=True)
        cmd = [sys.executable, "-m", "harness.cli", "run", "engine=openai", f"engine.base_url={self.proxy_url}",
               f"engine.model={model}", f"engine.tokenizer={tok}", "protocol=sweep", "protocol.load_points=[]",
               *extra, f"output_dir={self.out / 'traffic'}", f"experiment={cfg.experiment}",
               "mlflow.enabled=false", "report.enabled=false"]
        (self.out / "traffic").mkdir(parents=True, exist_ok=True)
        log = open(self.out / "traffic" / "traffic.log", "w")
        print("traffic: " + " ".join(cmd[3:]), flush=True)
        self.traffic = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.traffic_log = log

    def stop_traffic(self) -> None:
        """The load generator asked to stop (SIGINT: it writes what it has), killed after 60 s."""
        if self.traffic is None:
            return
        if self.traffic.poll() is None:
            try:
                os.killpg(self.traffic.pid, signal.SIGINT)
                self.traffic.wait(60)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.traffic.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.traffic.wait(10)
        self.traffic_log.close()
