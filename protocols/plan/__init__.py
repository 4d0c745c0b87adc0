"""protocol=plan: a fleet sized and priced for a traffic source from measured capacity."""
