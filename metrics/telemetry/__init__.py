"""Telemetry collection (data, not formulas): one sampler a module, the collector that runs
them and writes ``telemetry.parquet``, and the index that reads it back.

- ``base``: the row format and the ``Sampler`` interface;
- ``host``, ``nvml``, ``dcgm``, ``rapl``, ``engine``: the sources;
- ``sources``: which samplers ``telemetry.*`` asks for;
- ``collector``: the sampling thread, window edges, ``telemetry.parquet``;
- ``index``: a written table, indexed by source, device and quantity.
"""
