"""A ``ProxyServer`` from the ``proxy`` config group (``conf/schema.py``: ``Proxy``)."""

from __future__ import annotations

import os

from harness.proxy.routing import Router
from harness.proxy.runtime import check_placement
from harness.proxy.server import ProxyServer, Recorder, SideConfig
from loadgen.client import Timeouts
from metrics.slo import SLO


def check(pcfg: dict) -> None:
    """What the server cannot start without; errors name the key."""
    from urllib.parse import urlsplit

    for side in ("incumbent", "candidate"):
        url = pcfg.get(side)
        if url is None:
            continue
        u = urlsplit(str(url))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"proxy.{side}={url!r}: expected http(s)://HOST:PORT")
    if not pcfg.get("incumbent"):
        raise ValueError("proxy.incumbent: the incumbent's URL is required (http://HOST:PORT)")
    if pcfg.get("mode") != "rollback" and not pcfg.get("candidate"):
        raise ValueError(f"proxy.mode={pcfg.get('mode')} needs proxy.candidate (a URL); "
                         "proxy.mode=rollback runs without one")
    check_placement(pcfg)


def _key(pcfg: dict, side: str) -> str | None:
    var = pcfg.get(f"{side}_api_key_env")
    if not var:
        return None
    if var not in os.environ:
        raise ValueError(f"proxy.{side}_api_key_env={var}: the environment has no {var}")
    return os.environ[var]


def build_server(pcfg: dict, slo_cfg, records_path, on_row=None, tag: str = "p") -> ProxyServer:
    check(pcfg)
    t = pcfg.get("timeouts") or {}
    timeouts = Timeouts(**{k: float(t[k]) for k in ("connect_s", "ttft_s", "idle_s", "total_s") if k in t})
    sides = {}
    for side in ("incumbent", "candidate"):
        if pcfg.get(side):
            sides[side] = SideConfig(side, str(pcfg[side]), pcfg.get(f"{side}_model"), _key(pcfg, side), timeouts)
    router = Router(pcfg.get("mode", "shadow"), float(pcfg.get("canary_share", 0.0)), float(pcfg.get("mirror", 0.0)),
                    salt=str(pcfg.get("salt", "tokenfactory")), has_candidate="candidate" in sides)
    recorder = Recorder(records_path, SLO.from_config(slo_cfg), on_row)
    server = ProxyServer(sides["incumbent"], sides.get("candidate"), router, recorder,
                         compare=str(pcfg.get("compare", "greedy")), host=str(pcfg.get("host", "127.0.0.1")),
                         port=int(pcfg.get("port", 0)), prewarm=int(pcfg.get("prewarm", 16)), tag=tag)
    server.sticky = str(pcfg.get("sticky", "session"))
    return server
