"""The traffic a fleet is planned for (``protocol.traffic``): per request its arrival time,
prompt tokens and output tokens, from the composed workload (any trace the readers take,
after ``workload.window``/``time_scale``/``target_rate``/``max_output_tokens`` and the
engine's length limit), replayed as it is or stretched over a longer window by a rate curve.

With a rate curve of K relative values over ``duration_s``, the trace is tiled (its requests
repeated end to end, the gap between copies its own mean gap) and its clock warped so that
the mean rate of slice k is ``scale x curve[k]``: a request at tiled trace time tau arrives at
the wall time t with W(t) = tau, where W(t) = integral_0^t rate(s) / trace_rate ds.  The
trace's own burstiness and length mix are kept inside each slice; ``scale`` sets the curve's
mean to ``mean_rps`` (default: the trace's own mean rate) or its highest slice to ``peak_rps``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from conf.schema import DIURNAL_CURVE
from harness.errors import UserError
from loadgen.workloads.traces.prompts import fit_lengths
from loadgen.workloads.traces.replay import load_table
from loadgen.workloads.traces.transforms import mean_rate


@dataclass
class Traffic:
    arrival_s: np.ndarray           # sorted, from 0
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    duration_s: float               # the planned window: [0, duration_s]
    source: str                     # what it was built from, in words
    curve: list[float] = field(default_factory=list)   # the rate curve applied (empty: none)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def rate_profile(self, bucket_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(bucket start times, mean arrival rate in each bucket)."""
        edges = np.arange(0.0, self.duration_s + bucket_s, bucket_s)
        counts, _ = np.histogram(self.arrival_s, bins=edges)
        return edges[:-1], counts / bucket_s

    def describe(self) -> dict:
        t, r = self.rate_profile(min(300.0, max(self.duration_s / 48, 1.0)))
        return {"source": self.source, "requests": len(self), "duration_s": self.duration_s,
                "mean_rps": len(self) / self.duration_s if self.duration_s > 0 else 0.0,
                "peak_rps": float(r.max()) if r.size else 0.0,
                "peak_bucket_s": float(t[1] - t[0]) if t.size > 1 else None,
                "prompt_tokens_p50": float(np.median(self.prompt_tokens)) if len(self) else None,
                "output_tokens_p50": float(np.median(self.output_tokens)) if len(self) else None,
                "rate_curve": list(self.curve), "notes": list(self.notes)}


def build_traffic(cfg) -> Traffic:
    """The plan's traffic from the composed config (``workload``, ``engine.max_model_len``,
    ``protocol.traffic``)."""
    w = cfg.workload
    if not w.get("path"):
        raise UserError("tokenfactory plan needs a trace to plan for: workload=azure|mooncake|burstgpt|jsonl|sharegpt "
                        "workload.path=FILE (a synthetic workload has no arrival times)")
    try:
        table = load_table(w)
        table = fit_lengths(table, int(cfg.engine.max_model_len) if cfg.engine.get("max_model_len") else None,
                            str(w.on_too_long))
    except (ValueError, OSError) as e:
        raise UserError(str(e)) from None
    arrival = np.asarray(table.arrival_s, dtype=np.float64)
    keep = ~np.isnan(arrival)
    if not keep.all():
        raise UserError(f"{w.path}: {int((~keep).sum())} requests have no arrival time (a session's later turns, or a "
                        "trace without times): the plan replays open-loop arrivals only")
    order = np.argsort(arrival, kind="stable")
    arrival = arrival[order] - arrival[order][0]
    prompt = np.asarray(table.input_tokens, dtype=np.int64)[order]
    output = np.asarray(table.output_tokens, dtype=np.int64)[order]
    source = f"{w.name} {w.path} ({len(arrival)} requests over {arrival[-1]:.0f} s)"
    t = cfg.protocol.traffic
    curve = [float(x) for x in (t.rate_curve or [])]
    duration = t.duration_s
    if t.diurnal and not curve:
        curve = list(DIURNAL_CURVE)
        duration = duration or 86400.0
    if not curve:
        if t.mean_rps or t.peak_rps:
            raise UserError("protocol.traffic.mean_rps/peak_rps scale a rate curve: give protocol.traffic.rate_curve "
                            "or protocol.traffic.diurnal=true (or workload.target_rate to rescale the trace itself)")
        span = float(duration or (arrival[-1] if arrival.size else 0.0))
        keep = arrival <= span
        return Traffic(arrival[keep], prompt[keep], output[keep], span, source)
    if not duration:
        raise UserError("protocol.traffic.rate_curve needs protocol.traffic.duration_s (the window the curve spans)")
    if not any(c > 0 for c in curve):
        raise UserError(f"protocol.traffic.rate_curve={curve}: every value is 0 (no traffic)")
    if t.mean_rps and t.peak_rps:
        raise UserError("protocol.traffic: give mean_rps or peak_rps, not both")
    return stretch(arrival, prompt, output, curve, float(duration), t.mean_rps, t.peak_rps, source)


def stretch(arrival, prompt, output, curve: list[float], duration_s: float, mean_rps: float | None = None,
            peak_rps: float | None = None, source: str = "") -> Traffic:
    """The trace tiled over ``duration_s`` with its rate following ``curve`` (module doc)."""
    if arrival.size < 2 or arrival[-1] <= 0:
        raise UserError(f"{source}: a rate curve needs a trace with at least two distinct arrival times")
    base = mean_rate(arrival)
    c = np.asarray(curve, dtype=np.float64)
    scale = peak_rps / c.max() if peak_rps else (mean_rps or base) / c.mean()
    slice_s = duration_s / c.size
    rates = scale * c                                   # target requests/s per slice
    # W at slice edges: trace-seconds consumed by the end of each slice
    w_edges = np.concatenate([[0.0], np.cumsum(rates / base * slice_s)])
    period = float(arrival[-1]) + 1.0 / base            # one copy of the trace, then its mean gap
    copies = int(np.ceil(w_edges[-1] / period)) + 1
    tau = (arrival[None, :] + period * np.arange(copies)[:, None]).ravel()
    idx = np.tile(np.arange(arrival.size), copies)
    keep = tau < w_edges[-1]
    tau, idx = tau[keep], idx[keep]
    # invert W: piecewise linear between slice edges (flat where a slice's rate is 0)
    k = np.clip(np.searchsorted(w_edges, tau, side="right") - 1, 0, c.size - 1)
    dw = w_edges[k + 1] - w_edges[k]
    t = k * slice_s + np.where(dw > 0, (tau - w_edges[k]) / np.where(dw > 0, dw, 1.0), 0.0) * slice_s
    notes = [f"the trace ({arrival.size} requests, mean {base:.3g} req/s) tiled {copies}x over {duration_s:g} s, "
             f"its clock warped to a rate curve of {c.size} slices (mean {rates.mean():.3g} req/s, "
             f"peak {rates.max():.3g} req/s)"]
    return Traffic(t, prompt[idx], output[idx], duration_s, source, [float(x) for x in curve], notes)
