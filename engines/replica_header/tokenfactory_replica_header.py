"""An ASGI middleware that names the replica in every HTTP response: ``x-tokenfactory-replica:
$TOKENFACTORY_REPLICA`` (the header the load generator reads by default,
``client.replica_header``), so each request row knows which replica served it even behind a
router that forwards the workers' response headers.

It runs inside the engine's own server, not in tokenfactory: vLLM loads it with
``--middleware tokenfactory_replica_header.ReplicaHeader`` when this folder is on the engine
process's ``PYTHONPATH`` (it imports nothing of tokenfactory, and this folder is no package of
it).  Pure ASGI: the response head gets one header, the streamed body passes through untouched.
"""

from __future__ import annotations

import os

HEADER = b"x-tokenfactory-replica"
ENV = "TOKENFACTORY_REPLICA"


class ReplicaHeader:
    def __init__(self, app, replica: str | None = None):
        self.app = app
        name = replica if replica is not None else os.environ.get(ENV)
        if not name:
            raise RuntimeError(f"{ENV} is not set: the replica this engine is (r0, r1, p0, d0 ...)")
        self.value = name.encode("latin-1")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def named(message):
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (HEADER, self.value)]
            await send(message)

        return await self.app(scope, receive, named)
