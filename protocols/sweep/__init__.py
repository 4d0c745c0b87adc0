"""protocol=sweep: one config over its load points, repeated: its plan (the load points and
their repeats, ``load_points``; where adaptive load points and the SLO search place them,
``load_search``) and its record (the aggregates per load point over its repeats; ``record``).
A comparison's and an ablation's configs each run this plan, in blocks."""
