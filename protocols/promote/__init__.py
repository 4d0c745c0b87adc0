"""protocol=promote: a candidate behind the proxy through shadow and canary stages, gated, with
rollback: its plan (the stages and their state machine; ``plan``) and its run (engines, proxy,
traffic, gates and the record: ``run``)."""
