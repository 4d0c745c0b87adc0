"""protocol=promote: the two endpoints (URLs, or engines launched here) and the proxy between them."""

from __future__ import annotations

from omegaconf import OmegaConf

from conf.compose import compose_config
from conf.schema import ConfigError, validate
from harness import results_io
from harness.errors import UserError
from harness.proxy.pairs import PairBook
from harness.proxy.routing import CANDIDATE, INCUMBENT
from protocols.promote.stages import SIDES, RanStage
from protocols.promote.traffic import override_key


class Endpoints:
    """The promotion's engines and proxy, launched."""

    def launch_engines(self) -> None:
        from engines.base import EngineError
        from engines.registry import make_engine

        own = ("protocol", "proxy", "engine", "output_dir")
        base = [o for o in self.overrides if not override_key(o).startswith(own)]
        for side in SIDES:
            if self.launch[side] is None:
                continue
            try:
                sub = compose_config(base + self.launch[side])
                validate(sub)
                eng = make_engine(sub.engine, self.out / side)
                (self.out / side).mkdir(parents=True, exist_ok=True)
                print(f"starting the {side}: engine={eng.name} {' '.join(self.launch[side])} ...", flush=True)
                eng.start()
            except (ConfigError, ValueError, EngineError) as e:
                raise UserError(f"protocol.{side}: {e}") from None
            self.engines[side] = eng
            self.urls[side] = eng.base_url
            print(f"{side} ready at {eng.base_url}", flush=True)

    def start_proxy(self) -> None:
        from harness.proxy.process import ProxyProcess

        first = self.stages[0]
        pcfg = {**self.pcfg, **{s: self.urls[s] for s in SIDES}, "mode": first.mode,
                "canary_share": first.share, "mirror": first.mirror}
        if pcfg["port"] == 8080 and "proxy.port" not in {override_key(o) for o in self.overrides}:
            pcfg["port"] = 0  # a free port unless one was asked for
        tok = self.tokenizer()
        self.pairs = PairBook(tok)
        st = RanStage(0, first, 0, self.out)
        st.dir.mkdir(parents=True, exist_ok=True)
        self.proxy = ProxyProcess(pcfg, OmegaConf.to_container(self.cfg.slo, resolve=True),
                                  str(st.dir / results_io.REQUESTS))
        try:
            port = self.proxy.start()
        except RuntimeError as e:
            raise UserError(f"proxy: {e}") from None
        self.proxy_url = f"http://{pcfg['host']}:{port}"
        # the first stage starts when the proxy is in its mode
        st.start_ns = self.proxy.set_mode(first.mode, first.share, first.mirror)
        self.t0_ns = st.start_ns
        self.ran.append(st)
        self.machine.start(0.0)
        print(f"proxy at {self.proxy_url}" + (f" ({', '.join(self.proxy.placed)})" if self.proxy.placed else "")
              + f": incumbent {self.urls[INCUMBENT]}, candidate {self.urls[CANDIDATE]}; stage {first.name}", flush=True)

    def tokenizer(self):
        if self.pcfg.get("compare") == "off":
            return None
        name = None
        if INCUMBENT in self.engines:
            name = self.engines[INCUMBENT].tokenizer
        else:
            name = self.cfg.engine.get("tokenizer") or self.cfg.engine.get("model")
        if not name:
            return None
        from loadgen.workloads.prompts import load_tokenizer

        try:
            return load_tokenizer(str(name))
        except ValueError as e:
            raise UserError(str(e)) from None
