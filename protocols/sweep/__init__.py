"""protocol=sweep: one config over its load points, repeated: its record (the aggregates per
load point over its repeats; ``record``)."""
