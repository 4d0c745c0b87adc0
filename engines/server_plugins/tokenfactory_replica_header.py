"""Runs inside an engine's own interpreter (vLLM's ``--middleware``), never in the harness:
an ASGI middleware that names the replica in every response's headers, so each request row
of a deployment says which replica served it.

The harness puts this folder on the replica's ``PYTHONPATH`` and its name in
``TOKENFACTORY_REPLICA``; the header is ``x-tokenfactory-replica`` unless
``TOKENFACTORY_REPLICA_HEADER`` names another.  Standard library only: it must import in any
engine's environment.
"""

import os


class ReplicaHeader:
    """vLLM adds a class given to ``--middleware`` with ``app.add_middleware(cls)``."""

    def __init__(self, app):
        self.app = app
        self.header = (os.environ.get("TOKENFACTORY_REPLICA_HEADER") or "x-tokenfactory-replica").lower().encode()
        self.value = os.environ.get("TOKENFACTORY_REPLICA", "").encode()

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or not self.value:
            await self.app(scope, receive, send)
            return

        async def send_named(message):
            if message.get("type") == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []), (self.header, self.value)]
            await send(message)

        await self.app(scope, receive, send_named)
