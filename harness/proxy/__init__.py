"""The promotion proxy (step 7 of the seed's protocol): an OpenAI-compatible streaming reverse
proxy in front of an incumbent and a candidate endpoint.

- ``routing``: which side serves a request (shadow, canary share sticky per caller, rollback);
- ``forward``: a caller's stream, written as the upstream's bytes arrive, and the splice that
  continues a failed candidate stream from the incumbent;
- ``server``: the aiohttp application, the upstream clients (kernel receive stamps), records;
- ``process``: the proxy in a child process driven by the promotion (``protocols.promote.run``);
- ``standalone``: the proxy on its own (``tokenfactory proxy``, ``harness/commands/proxy.py``).
"""
