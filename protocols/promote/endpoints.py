"""protocol=promote: the two endpoints (URLs, or engines launched here) and the proxy between them."""

from __future__ import annotations

from omegaconf import OmegaConf

from conf.compose import compose_config
from conf.schema import ConfigError, validate
from harness import results_io
from harness.errors import UserError
from harness.proxy.pairs import PairBook
from harness.proxy.routing import CANDIDATE, INCUMBENT
from protocols.promote.state import SIDES, PromotionState, RanStage
from protocols.promote.traffic import override_key


class Endpoints:
    """The promotion's engines and proxy, launched: their URLs, the proxy, the pair book and the first
    stage (the clock starts when the proxy takes its mode) kept in the state."""

    def __init__(self, state: PromotionState):
        self.state = state

    def launch_engines(self) -> None:
        ps = self.state
        from engines.base import EngineError
        from engines.registry import make_engine

        own = ("protocol", "proxy", "engine", "output_dir")
        base = [o for o in ps.overrides if not override_key(o).startswith(own)]
        for side in SIDES:
            if ps.launch[side] is None:
                continue
            try:
                sub = compose_config(base + ps.launch[side])
                validate(sub)
                eng = make_engine(sub.engine, ps.out / side)
                (ps.out / side).mkdir(parents=True, exist_ok=True)
                print(f"starting the {side}: engine={eng.name} {' '.join(ps.launch[side])} ...", flush=True)
                eng.start()
            except (ConfigError, ValueError, EngineError) as e:
                raise UserError(f"protocol.{side}: {e}") from None
            ps.engines[side] = eng
            ps.urls[side] = eng.base_url
            print(f"{side} ready at {eng.base_url}", flush=True)

    def start_proxy(self) -> None:
        ps = self.state
        from harness.proxy.process import ProxyProcess

        first = ps.stages[0]
        pcfg = {**ps.pcfg, **{s: ps.urls[s] for s in SIDES}, "mode": first.mode,
                "canary_share": first.share, "mirror": first.mirror}
        if pcfg["port"] == 8080 and "proxy.port" not in {override_key(o) for o in ps.overrides}:
            pcfg["port"] = 0  # a free port unless one was asked for
        tok = self.tokenizer()
        ps.pairs = PairBook(tok)
        st = RanStage(0, first, 0, ps.out)
        st.dir.mkdir(parents=True, exist_ok=True)
        ps.proxy = ProxyProcess(pcfg, OmegaConf.to_container(ps.cfg.slo, resolve=True),
                                  str(st.dir / results_io.REQUESTS))
        try:
            port = ps.proxy.start()
        except RuntimeError as e:
            raise UserError(f"proxy: {e}") from None
        ps.proxy_url = f"http://{pcfg['host']}:{port}"
        # the first stage starts when the proxy is in its mode
        st.start_ns = ps.proxy.set_mode(first.mode, first.share, first.mirror)
        ps.t0_ns = st.start_ns
        ps.ran.append(st)
        ps.machine.start(0.0)
        print(f"proxy at {ps.proxy_url}" + (f" ({', '.join(ps.proxy.placed)})" if ps.proxy.placed else "")
              + f": incumbent {ps.urls[INCUMBENT]}, candidate {ps.urls[CANDIDATE]}; stage {first.name}", flush=True)

    def tokenizer(self):
        ps = self.state
        if ps.pcfg.get("compare") == "off":
            return None
        name = None
        if INCUMBENT in ps.engines:
            name = ps.engines[INCUMBENT].tokenizer
        else:
            name = ps.cfg.engine.get("tokenizer") or ps.cfg.engine.get("model")
        if not name:
            return None
        from loadgen.workloads.prompts import load_tokenizer

        try:
            return load_tokenizer(str(name))
        except ValueError as e:
            raise UserError(str(e)) from None
