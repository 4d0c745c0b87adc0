"""protocol=compare: several configs in randomised blocks, compared at equal SLO: its plan
(configs by name; ``plan``) and its record (``comparison.json``, of its configs run in blocks
and of experiments run separately: ``record``)."""
