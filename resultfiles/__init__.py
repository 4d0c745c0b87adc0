"""How a results file is written and read, below every package that writes one: a file
lands whole or not at all (``whole``), and a Parquet file's layout (``parquet``).  What each
file is called and holds is its owner's (``harness.results_io`` names a run folder's files;
``loadgen.records`` and ``metrics.telemetry`` give the schemas of the two the load point writes).
"""
