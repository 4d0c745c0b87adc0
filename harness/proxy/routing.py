"""Which side serves a request, and whether the other side gets a copy.

- ``shadow``: the incumbent serves every request; every request is copied to the candidate,
  whose response is recorded and discarded.
- ``canary``: a caller is on the candidate when ``h(key) < share``, h a hash of its sticky key
  (``proxy.salt`` + key) into [0, 1): the same caller stays on the same side while the share
  holds, and one on the candidate at 1 % is still there at 5 % (the threshold only grows).  A
  share ``mirror`` of the candidate-served requests is also run on the incumbent (compared,
  discarded).  Without a key a request is drawn on its own (seeded).
- ``rollback``: everything to the incumbent, nothing copied.

The sticky key (``proxy.sticky``): ``session`` = the ``X-Session-Id`` header, else the body's
``user``, else the API key; ``api_key`` = the API key only; ``none`` = per request.  Keys are
hashed, never stored.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

INCUMBENT, CANDIDATE = "incumbent", "candidate"
MODES = ("shadow", "canary", "rollback")


def bucket(key: str, salt: str) -> float:
    """A key's place in [0, 1): the first 8 bytes of blake2b(salt, key)."""
    h = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8, key=salt.encode()[:64]).digest()
    return int.from_bytes(h, "big") / 2.0 ** 64


def sticky_key(sticky: str, headers, body: dict) -> str | None:
    """The caller's key under ``proxy.sticky`` (module doc), or None."""
    if sticky == "none":
        return None
    auth = headers.get("Authorization") or headers.get("X-Api-Key")
    if sticky == "api_key":
        return ("k:" + auth) if auth else None
    sid = headers.get("X-Session-Id")
    if sid:
        return "s:" + sid
    user = body.get("user")
    if isinstance(user, str) and user:
        return "u:" + user
    return ("k:" + auth) if auth else None


@dataclass
class Route:
    primary: str          # the side whose response the caller gets
    copy: bool            # the other side gets a copy (shadow / mirror)


class Router:
    def __init__(self, mode: str = "shadow", share: float = 0.0, mirror: float = 0.0, salt: str = "tokenfactory",
                 seed: int = 0, has_candidate: bool = True):
        self.salt = salt
        self.rng = random.Random(seed)
        self.has_candidate = has_candidate
        self.set(mode, share, mirror)

    def set(self, mode: str, share: float | None = None, mirror: float | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"proxy.mode={mode!r}: expected one of {', '.join(MODES)}")
        if mode != "rollback" and not self.has_candidate:
            raise ValueError(f"proxy.mode={mode} needs proxy.candidate (a URL)")
        self.mode = mode
        if share is not None:
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"proxy.canary_share={share}: must be within [0, 1]")
            self.share = float(share)
        if mirror is not None:
            if not 0.0 <= mirror <= 1.0:
                raise ValueError(f"proxy.mirror={mirror}: must be within [0, 1]")
            self.mirror = float(mirror)

    def route(self, key: str | None) -> Route:
        mode = self.mode
        if mode == "rollback":
            return Route(INCUMBENT, False)
        if mode == "shadow":
            return Route(INCUMBENT, True)
        u = bucket(key, self.salt) if key is not None else self.rng.random()
        if u < self.share:
            return Route(CANDIDATE, self.mirror > 0 and (self.mirror >= 1 or self.rng.random() < self.mirror))
        return Route(INCUMBENT, False)
