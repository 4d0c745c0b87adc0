"""protocol=tune: an Optuna study over the knob space for the cheapest config that meets the
SLO: its plan (the space, its distributions and sampler; ``plan``) and its run (the study,
the trials and the record: ``run``)."""
