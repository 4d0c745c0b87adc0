"""protocol=profile: an engine's prefill time against prompt length and its decode step time
against batch size and context length, measured through its API: its plan (the ladders, ``plan``),
its run (the ladders on one engine, ``run``) and its record (``profile.json`` and the Dynamo
mocker's NPZ, ``record``); the formulas are ``metrics.profile``'s."""
