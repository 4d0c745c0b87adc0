"""Tracked benchmarks (``track=NAME``): a history of experiments across engine versions in one
MLflow store (``history``), the newest compared with a baseline by the comparison's intervals
and margin and a gate on regressions (``verdicts``); the history page is the report's
(``harness.report.track``)."""
