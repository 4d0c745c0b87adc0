"""A workload from its config: the iterator of ``WorkItem`` s a load point replays."""

from __future__ import annotations

from loadgen.workloads.lora import AdapterMix, WithAdapters
from loadgen.workloads.prompts import PromptBuilder
from loadgen.workloads.synthetic import synthetic_items
from loadgen.workloads.traces.readers import FORMATS
from loadgen.workloads.traces.replay import TraceWorkload


def make_workload(wcfg, builder: PromptBuilder, n: int | None, max_model_len: int | None):
    """``workload=synthetic`` or a trace format; ``n`` caps the requests (None: endless or
    the whole trace).  A trace's iterator also carries ``.table``, ``.followup`` (sessions'
    later turns) and ``.expected_turns``.  Raises ValueError for a workload that cannot be
    built (the message names the file, line or key)."""
    name = wcfg.get("name")
    lora = wcfg.get("lora")
    mix = AdapterMix.from_config(lora, int(wcfg.get("seed") or 0)) if lora is not None else None
    if name == "synthetic":
        items = synthetic_items(wcfg, builder, n, max_model_len)
    elif name in FORMATS:
        items = TraceWorkload(wcfg, builder, n, max_model_len)
    else:
        raise ValueError(f"workload={name}: unknown workload (known: synthetic, {', '.join(FORMATS)})")
    return WithAdapters(items, mix) if mix is not None else items
