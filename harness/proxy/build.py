"""A ``ProxyServer`` from the ``proxy`` config group (``conf/schema/proxy.py``: ``Proxy``)."""

from __future__ import annotations

import os

from conf.schema import Proxy
from harness.proxy.routing import Router
from harness.proxy.runtime import check_placement
from harness.proxy.server import ProxyServer, Recorder, SideConfig
from metrics.slo import SLO


def check(p: Proxy) -> None:
    """What the server cannot start without; errors name the key."""
    from urllib.parse import urlsplit

    for side in ("incumbent", "candidate"):
        url = getattr(p, side)
        if url is None:
            continue
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"proxy.{side}={url!r}: expected http(s)://HOST:PORT")
    if not p.incumbent:
        raise ValueError("proxy.incumbent: the incumbent's URL is required (http://HOST:PORT)")
    if p.mode != "rollback" and not p.candidate:
        raise ValueError(f"proxy.mode={p.mode} needs proxy.candidate (a URL); "
                         "proxy.mode=rollback runs without one")
    check_placement(p)


def _key(p: Proxy, side: str) -> str | None:
    var = getattr(p, f"{side}_api_key_env")
    if not var:
        return None
    if var not in os.environ:
        raise ValueError(f"proxy.{side}_api_key_env={var}: the environment has no {var}")
    return os.environ[var]


def build_server(p: Proxy, slo_cfg, records_path, on_row=None, tag: str = "p") -> ProxyServer:
    """``p``: the typed ``proxy`` config (``conf.schema.typed(node, Proxy)``)."""
    check(p)
    timeouts = p.timeouts
    sides = {}
    for side in ("incumbent", "candidate"):
        if getattr(p, side):
            sides[side] = SideConfig(side, getattr(p, side), getattr(p, f"{side}_model"), _key(p, side), timeouts)
    router = Router(p.mode, p.canary_share, p.mirror, salt=p.salt, has_candidate="candidate" in sides)
    recorder = Recorder(records_path, SLO.from_config(slo_cfg), on_row)
    server = ProxyServer(sides["incumbent"], sides.get("candidate"), router, recorder, compare=p.compare,
                         host=p.host, port=p.port, prewarm=p.prewarm, tag=tag)
    server.sticky = p.sticky
    return server
