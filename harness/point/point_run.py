"""What one load point's steps hand each other (``PointRun``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from conf.load_point import RunSpec
from engines.live_scaler import LiveScaler
from engines.watchdog import EngineFault
from harness.point.inputs import PointInputs
from harness.point.progress import Progress
from loadgen.dispatch import LoadSpec
from loadgen.records import RecordWriter
from loadgen.workloads.item import WorkItem


@dataclass
class PointRun:
    """One point: its run spec and folder, then what each step made, in step order."""

    spec: RunSpec
    run_dir: Path
    last: bool                           # the engine is stopped when this point ends
    window_open_ns: int                  # this point's observation window opened here
    inputs: PointInputs                  # what it reads of the config
    load: LoadSpec | None = None
    # the workload's WorkItems (its iterator may carry .table, .followup, .expected_turns, .skipped)
    items: Iterator[WorkItem] | None = None
    workload_stats: dict = field(default_factory=dict)
    writer: RecordWriter | None = None
    stats: dict = field(default_factory=dict)   # the dispatcher's: start_ns, end_ns, sent, timestamp_source
    client_cpu_s: float = 0.0
    engine_alive: bool = True
    window_close_ns: int | None = None
    telemetry_path: Path | None = None
    telemetry: pa.Table | None = None    # the window's telemetry.parquet, as written (close_window)
    requests: pa.Table | None = None
    summary: dict = field(default_factory=dict)
    progress: Progress | None = None     # the point's progress bars (dispatch)
    faults: list[EngineFault] = field(default_factory=list)   # engine faults during the point
    failure: EngineFault | None = None   # the fault that failed the point (None: it did not fail)
    scaler: LiveScaler | None = None     # live autoscaling during the load (harness.autoscale_record)

