"""protocol=promote: the traffic: tokenfactory's load generator through the proxy, in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from harness.errors import UserError
from harness.proxy.routing import INCUMBENT
from protocols.promote.state import PromotionState

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
    """The promotion's load-generator traffic: its process and log, started through the state's proxy."""

    def __init__(self, state: PromotionState):
        self.state = state
        self.process: subprocess.Popen | None = None
        self.log = None

    def start(self) -> None:
        """``tokenfactory run`` against the proxy in a process of its own (its output in traffic/traffic.log)."""
        ps = self.state
        cfg = ps.cfg
        if INCUMBENT in ps.engines:
            eng = ps.engines[INCUMBENT]
            model, tok = eng.served_model, eng.tokenizer
        else:
            model = cfg.engine.get("served_model_name") or cfg.engine.get("model")
            tok = cfg.engine.get("tokenizer") or model
        if not model:
            raise UserError("engine.model: the served model's name for the traffic through the proxy "
                            "(and engine.tokenizer to build its prompts), or protocol.incumbent=[...] to launch it")
        extra = traffic_overrides(ps.overrides)
        keys = {override_key(o) for o in extra}
        if "load.stop_when_saturated" not in keys:  # a promotion's traffic is not a saturation probe
            extra.append("load.stop_when_saturated=false")
        if cfg.load.kind != "trace" and not keys & {"load.duration_s", "load.num_requests"}:
            total = sum(s.max_duration_s for s in ps.stages) + float(cfg.protocol.after_s)
            extra += [f"load.duration_s={total:g}", "load.num_requests=null"]
            print(f"note: traffic for up to {total:g} s (the stages' max_duration_s and protocol.after_s); "
                  "give load.duration_s to change it", flush=True)
        cmd = [sys.executable, "-m", "harness.cli", "run", "engine=openai", f"engine.base_url={ps.proxy_url}",
               f"engine.model={model}", f"engine.tokenizer={tok}", "protocol=sweep", "protocol.load_points=[]",
               *extra, f"output_dir={ps.out / 'traffic'}", f"experiment={cfg.experiment}",
               "mlflow.enabled=false", "report.enabled=false"]
        (ps.out / "traffic").mkdir(parents=True, exist_ok=True)
        log = open(ps.out / "traffic" / "traffic.log", "w")
        print("traffic: " + " ".join(cmd[3:]), flush=True)
        self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.log = log

    def ended(self) -> int | None:
        """The load generator's exit status once it has ended (None: running, or none started)."""
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        """The load generator asked to stop (SIGINT: it writes what it has), killed after 60 s."""
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGINT)
                self.process.wait(60)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait(10)
        self.log.close()
