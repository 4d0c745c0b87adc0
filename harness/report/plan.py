"""plan.html: a fleet plan (plan.json, ``protocols.plan``) as one self-contained page.

Replicas over time beside the traffic's rate, attainment over time, cost per million good
output tokens with its interval per config at each SLO and policy variant, the measured
operating points the plan was driven by, the planner's answers, the validation against a
real replay where there is one, and every warning (those that change or limit the pick on the
first screen, ranked: ``protocols.plan.caveats``).  A value marked "outside the
measurements" came from a simulation that served some requests beyond every measured run.
"""

from __future__ import annotations

from pathlib import Path

from harness.caveats import DETAILS, RANKS
from harness.report import style
from harness.report.data import number
from harness.report.page import Note, document, figure_html, note_html
from harness.report.tables import esc, fmt, table
from harness.results_io import PLAN, read_json
from metrics.plan_pick import runner_up_text

PAGE = "plan.html"
ROWS = (("slo_attainment", "SLO attainment"), ("goodput_rps", "goodput req/s"),
        ("good_output_throughput", "good out tok/s"), ("p50_ttft_ms", "p50 TTFT ms"), ("p90_ttft_ms", "p90 TTFT ms"),
        ("p99_ttft_ms", "p99 TTFT ms"), ("p99_tpot_ms", "p99 TPOT ms"), ("replicas_max", "replicas at peak"),
        ("replicas_mean", "replicas on average"), ("starting_replica_seconds", "replica-seconds starting"),
        ("serving_replica_seconds", "replica-seconds serving"),
        ("draining_replica_seconds", "replica-seconds draining"),
        ("paid_replica_seconds", "replica-seconds paid"),
        ("idle_replica_seconds", "idle replica-seconds"),
        ("overprovisioned_replica_seconds", "over-provisioned replica-seconds"), ("cost_total", "cost"),
        ("cost_per_mtok_good", "cost / M good tok"), ("headroom_cost", "cost of the headroom"))


def _est(m: dict) -> str:
    v, iv = m.get("value"), m.get("interval")
    return fmt(v) + (f" [{fmt(iv[0])}, {fmt(iv[1])}]" if iv else "")


def _metric(metrics: dict, key: str) -> dict:
    """A config's metric; a plan.json written before the bill named its parts has the paid
    replica-seconds as ``replica_seconds`` and no parts (shown empty)."""
    if key == "paid_replica_seconds" and key not in metrics:
        key = "replica_seconds"
    return metrics.get(key) or {}


def _slo(s: dict) -> str:
    return ", ".join(f"{k} ≤ {fmt(v)}" for k, v in s.items() if k.endswith("_ms") and v is not None) + \
        f" (p{fmt(s.get('percentile', 99))})"


def plan_tables(doc: dict) -> str:
    out = []
    for plan in doc["plans"]:
        names = list(plan["configs"])
        head = ["metric"] + [n + (f" ({plan['configs'][n]['source']})"
                                  if plan["configs"][n].get("source") in ("estimated", "emulated") else
                                  f" ({modelled_text(plan['configs'][n]['modelled'])})"
                                  if plan["configs"][n].get("source") == "modelled" else
                                  " (outside the measurements)" if plan["configs"][n]["outside_measurements"] else "")
                             for n in names]
        rows = [[esc(label)] + [esc(_est(_metric(plan["configs"][n]["metrics"], k))) for n in names]
                for k, label in ROWS]
        rows.append([esc("cost / M good tok, with the model's validation residuals")] +
                    [esc(_with_model(plan["configs"][n])) for n in names])
        rows.append([esc("meets the SLO")] + [esc(fmt(plan["configs"][n]["meets_slo"])) for n in names])
        rows.append([esc("replica model")] + [esc(config_model_text(plan["configs"][n])) for n in names])
        rows.append([esc("scale-ups / downs")] + [esc(f"{plan['configs'][n]['scale_ups']} / "
                                                      f"{plan['configs'][n]['scale_downs']}") for n in names])
        title = f"{plan['variant']} policy {' '.join(plan['variant_overrides'])} at {_slo(plan['slo'])}"
        skipped = "".join(f"<p class='warning'>{esc(n)}: not planned: {esc(w)}</p>"
                          for n, w in plan["skipped"].items())
        out.append(f"<h3>{esc(title)}</h3>" + (table(head, rows, "plan") if names else "") + skipped +
                   f"<p><b>{esc(plan['cheapest']['verdict'])}</b></p>"
                   + (f"<p>{esc(runner_up_text(plan['cheapest']))}</p>"
                      if "runner_up_cheaper" in plan["cheapest"] else ""))
    return "".join(out)


def _with_model(entry: dict) -> str:
    """A config's cost interval over its joint resamples, or why it has none (a plan.json from
    before the model error: empty)."""
    iv = entry["metrics"]["cost_per_mtok_good"].get("interval_with_model_error")
    me = entry.get("model_error") or {}
    if iv:
        k = len(me.get("cases") or [])
        return f"[{fmt(iv[0])}, {fmt(iv[1])}] ({k} validation case{'s' if k != 1 else ''} of {me.get('model')})"
    return me.get("why", "")


def model_error_html(doc: dict) -> str:
    """The model's validation residuals the verdicts folded in (plan.json's ``model_error``), and
    whether they were held out."""
    me = doc.get("model_error")
    if not me:
        return ""
    if not me.get("applied"):
        return f"<p>{esc(me.get('why', ''))}</p>"
    held = {True: "held out: the model was fixed before these runs",
            False: "not held out by construction: the model was chosen with these runs in view"}.get(
        me.get("held_out"), "held out or not: not stated")
    rows = []
    for model, cases in me.get("models", {}).items():
        for case, c in cases.items():
            errs = "; ".join(f"{k} {fmt(v['error'])}" for k, v in c["metrics"].items() if v.get("error") is not None)
            rows.append([esc(model), esc(case), esc(fmt(c["cost_factor"])), esc(errs)])
    notes = "".join(f"<li>{esc(n)}</li>" for n in me.get("notes", []))
    return (f"<p>{esc(me['file'])}: {esc(me.get('source') or 'no source stated')} ({esc(held)}).</p>"
            "<p>Each verdict's interval and its chance that the runner-up is the cheaper are over joint "
            "resamples: every block resample of a config's capacity times every validation case's cost factor of its "
            "replica model (measured over predicted cost per good token).</p>"
            + table(["replica model", "case", "cost factor (measured / predicted)",
                     "relative error (predicted - measured) / measured"], rows, "model_error")
            + (f"<ul>{notes}</ul>" if notes else ""))


def answers_html(doc: dict) -> str:
    a = doc.get("answers") or {}
    rows = [[esc(n), esc(fmt(r["peak"])), esc(fmt(r["mean"])),
             esc(fmt((a["headroom"].get(n) or {}).get("overprovisioned_replica_hours"))),
             esc(fmt((a["headroom"].get(n) or {}).get("idle_replica_hours"))),
             esc(fmt((a["headroom"].get(n) or {}).get("headroom_cost"))),
             esc(fmt((a["headroom"].get(n) or {}).get("share_of_cost")))]
            for n, r in (a.get("replicas") or {}).items()]
    html = table(["config", "replicas at peak", "on average", "over-provisioned replica-hours", "idle replica-hours",
                  "headroom cost", "share of cost"], rows, "answers") if rows else ""
    if len(a.get("slos") or []) > 1:
        names = sorted({n for s in a["slos"] for n in s["cost_per_mtok_good"]})
        rows = [[esc(_slo(s["slo"]))] + [esc(fmt(s["cost_per_mtok_good"].get(n)) + ("" if s["meets_slo"].get(n, False)
                                                                                     else " (misses)")) for n in names]
                + [esc(fmt(s["cheapest"]))] for s in a["slos"]]
        html += "<h3>What a tighter SLO costs (cost / M good tok)</h3>" + table(["SLO"] + names + ["cheapest"], rows)
    if a.get("variants"):
        names = sorted({n for v in a["variants"] for n in v["cost_per_mtok_good"]})
        rows = [[esc(v["variant"] + " " + " ".join(v["overrides"]))] +
                [esc(f"{fmt(v['cost_per_mtok_good'].get(n))} (attainment {fmt(v['slo_attainment'].get(n))})")
                 for n in names] for v in a["variants"]]
        html += "<h3>Policy variants at the first SLO</h3>" + table(["variant"] + names, rows)
    return html


def estimates_html(doc: dict) -> str:
    """Estimated candidates: each point beside its roofline bound, and the error against
    measured runs of the same config where there are some."""
    out = []
    for name, e in (doc.get("estimates") or {}).items():
        rows = []
        for q in e["points"]:
            rf = q.get("roofline") or {}
            rows.append([esc(fmt(q["in_flight"])), esc(fmt(q["rate_rps"])), esc(fmt(q["ttft_ms"])),
                         esc(fmt(q["tpot_ms"])), esc(fmt(_ms(rf.get("prefill_s")))),
                         esc(fmt(_ms(rf.get("decode_step_s")))),
                         esc("yes: impossible" if rf.get("faster_than_roofline") else "no")])
        out.append(f"<h3>{esc(name)} (estimated: {esc(e['origin'])})</h3>" + table(
            ["in flight", "req/s", "TTFT ms (estimated)", "TPOT ms (estimated)", "prefill bound ms (roofline)",
             "decode step bound ms (roofline)", "faster than the bound"], rows))
        for m, errs in (e.get("error_against_measured") or {}).items():
            rows = [[esc(fmt(r.get("in_flight_measured"))), esc(fmt(r.get("ttft_s_rel_error"))),
                     esc(fmt(r.get("tpot_s_rel_error"))), esc(fmt(r.get("throughput_rps_rel_error")))]
                    for r in errs]
            out.append(f"<p>Error against measured {esc(m)}:</p>" + table(
                ["in flight (measured)", "TTFT rel. error", "TPOT rel. error", "throughput rel. error"], rows))
    return "".join(out)


def _ms(seconds):
    return seconds * 1e3 if seconds is not None else None


def validation_html(doc: dict) -> str:
    v = doc.get("validation")
    if not v:
        return ""
    rows = [[esc(r["metric"]), esc(fmt(r["measured"])), esc(fmt(r["predicted"])), esc(fmt(r["error"])),
             esc(r.get("error_kind", ""))] for r in v["rows"]]
    notes = "".join(f"<li>{esc(n)}</li>" for n in v.get("notes", []))
    head = ["metric", "measured (real replay)", "predicted (plan)", "error", "error is"]
    return (f"<p>{esc(v['what'])}</p>" + table(head, rows, "validation") + (f"<ul>{notes}</ul>" if notes else ""))


def figures(doc: dict) -> list[style.Fig]:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figs = []
    base = next((p for p in doc["plans"] if p["variant"] == "base"), None)
    if base and base["configs"]:
        col = style.colours(list(base["configs"]))
        fig = make_subplots(specs=[[{"secondary_y": True}]])
        first = next(iter(base["configs"].values()))["timeline"]
        hours = [t / 3600 for t in first["start_s"]]
        fig.add_trace(go.Scatter(x=hours, y=first["rate_rps"], name="arrival rate (req/s)", line={"color": "#999"}),
                      secondary_y=False)
        for n, e in base["configs"].items():
            tl = e["timeline"]
            fig.add_trace(go.Scatter(x=[t / 3600 for t in tl["start_s"]], y=tl["replicas_paid"], name=style.text(n) +
                                     " replicas", line={"color": col[n], "shape": "hv"}), secondary_y=True)
        style.base_layout(fig, "Traffic and replicas over the window", "hours from the window's start", "req/s")
        fig.update_yaxes(title_text="replicas paid", secondary_y=True)
        figs.append(style.Fig("plan_replicas", "timeline", "replicas", fig, wide=True,
                              notes=[f"Base policy at {_slo(base['slo'])}; buckets of {fmt(first['bucket_s'])} s; "
                                     "replicas paid for at each bucket's end (starting, serving or draining)."]))
        fig = go.Figure()
        for n, e in base["configs"].items():
            tl = e["timeline"]
            fig.add_trace(go.Scatter(x=[t / 3600 for t in tl["start_s"]], y=tl["attainment"], name=style.text(n),
                                     line={"color": col[n]}))
        style.base_layout(fig, "Predicted SLO attainment over the window", "hours from the window's start",
                          "share of requests meeting the SLO")
        figs.append(style.Fig("plan_attainment", "timeline", "attainment", fig, wide=True,
                              notes=["Requests grouped by the bucket they arrived in."]))
    fig = go.Figure()
    names = sorted({n for p in doc["plans"] for n in p["configs"]})
    col = style.colours(names)
    for n in names:
        xs, ys, lo, hi = [], [], [], []
        for p in doc["plans"]:
            e = p["configs"].get(n)
            if not e:
                continue
            m = e["metrics"]["cost_per_mtok_good"]
            xs.append(style.text(f"{p['variant']} · {_slo(p['slo'])}"))
            ys.append(number(m["value"]))
            down, up = error_bar(m)
            lo.append(down)
            hi.append(up)
        fig.add_trace(go.Bar(x=xs, y=ys, name=style.text(n), marker_color=col[n],
                             error_y={"type": "data", "array": hi, "arrayminus": lo}))
    style.base_layout(fig, "Cost per million good output tokens over the whole window", "plan",
                      "cost / M good tokens")
    figs.append(style.Fig("plan_cost", "cost", "cost", fig, wide=True,
                          notes=[f"Error bars: {doc['confidence']:.0%} interval over block resamples of the capacity "
                                 "measurements; an interval reaching +∞ (resamples with no good token) is drawn to its "
                                 "value and said in the plan's table."]))
    fig = go.Figure()
    cands = doc.get("candidates") or {}
    col = style.colours(list(cands))
    for n, c in cands.items():
        for size, pts in c["points"].items():
            fig.add_trace(go.Scatter(x=[p["rate_rps"] for p in pts], y=[p["p99_ttft_ms"] for p in pts], mode="markers",
                                     name=style.text(f"{n} at {size} replica(s)"),
                                     marker={"color": col[n], "symbol": "circle" if size == "1" else "diamond"}))
    style.base_layout(fig, "The operating points the plan samples from", "offered load per replica (req/s)",
                      "p99 TTFT (ms)")
    fig.update_yaxes(type="log")
    figs.append(style.Fig("plan_points", "capacity", "points", fig,
                          notes=["One marker per measured (or estimated) run and block."]))
    return figs


def error_bar(m: dict) -> tuple[float, float]:
    """(below, above) the value of a metric's interval (plan.json: a bound may be "inf"); an
    infinite or missing side is drawn as 0 (the table prints ∞)."""
    v = number(m.get("value"))
    iv = m.get("interval") or [m.get("value"), m.get("value")]
    lo, hi = number(iv[0]), number(iv[1])
    if v is None:
        return 0.0, 0.0
    return (v - lo if lo is not None else 0.0), (hi - v if hi is not None else 0.0)


def modelled_text(m: dict) -> str:
    """A modelled config (plan.json's ``modelled``): never run, its base and knobs, and the
    scheduler model's validated error or "not validated"."""
    knobs = ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in m["knobs"].items())
    return f"modelled, never run: {m['base']} with {knobs}; {m.get('validated', 'not validated')}"


def approximate_text(m: dict, sampled: dict | None = None) -> str:
    """The scheduler model's approximation, where one was asked for (``replica_model.approximate``)
    or made (a config's ``replay_sample``: what it replayed); empty for exact replay."""
    got = (sampled or {}).get("text") or (m.get("approximate") or {}).get("text")
    return got or ""


def config_model_text(entry: dict) -> str:
    """A config's replica model in a plan's table: its name, and the approximation's numbers."""
    m = entry.get("replica_model") or {"model": "processor_sharing"}
    if m["model"] != "scheduler":
        return "processor sharing"
    approx = approximate_text(m, entry.get("replay_sample"))
    return "scheduler (Dynamo's replay)" + (f"; {approx}" if approx else ", exact")


def replica_model_text(c: dict) -> str:
    """Which model served a candidate's replicas in the plan, and why (plan.json's
    ``candidates[NAME].replica_model``; a plan from before it: processor sharing)."""
    m = c.get("replica_model") or {"model": "processor_sharing", "reason": "not recorded"}
    name = ("the engine's scheduler (Dynamo's replay)" if m["model"] == "scheduler"
            else "processor sharing (fitted slowdown curve)")
    approx = approximate_text(m) if m["model"] == "scheduler" else ""
    return (f"{name}: {m.get('reason', '')}" + (f"; {approx}" if approx else "")
            + (f"; {modelled_text(m['modelled'])}" if m.get("modelled") else ""))


def write_plan_page(folder: str | Path) -> Path:
    folder = Path(folder)
    doc = read_json(folder / PLAN)
    figs = figures(doc)
    by = {}
    for f in figs:
        by.setdefault(f.section, []).append(figure_html(f, {}))
    t = doc["traffic"]
    sub = [f"Traffic: {t['source']}, {t['requests']} requests over {fmt(t['duration_s'])} s "
           f"(mean {fmt(t['mean_rps'])} req/s, peak {fmt(t['peak_rps'])} req/s).",
           Note(f"{len(doc['candidates'])} candidate(s); {doc['resamples']} block resamples at most; router "
                f"{doc['routing']}.", [f"{n}: {c['source']} from {c['origin']}, sizes {c['sizes']}, cold start "
                                        f"{[round(x, 1) for x in c['cold_start_s']]} s; replica model: "
                                        f"{replica_model_text(c)}" for n, c in
                                        doc["candidates"].items()])]
    answer = doc.get("answer") or {}
    # the answer first, before any warning or figure (as an experiment's page, harness.report.build)
    sub = [Note(f"answer (plan): {x}" if i == 0 else x, css="answer") for i, x in enumerate(answer.get("lines") or [])
           ] + sub
    caveats = doc.get("caveats")
    if caveats is None:   # a plan.json from before its warnings were ranked
        if doc.get("cost_lower_bound"):
            sub.append(f"Cost: {doc['cost_lower_bound']['reason']}.")
        caveats = []
    # the first screen: what changes the pick or limits it, ranked (protocols.plan.caveats); the details below
    sub += [Note(c["text"], list(c.get("detail") or [])) for c in caveats if c["rank"] != RANKS[DETAILS]]
    warn = "".join(f"<li>{esc(w)}</li>" for w in doc.get("warnings", []))
    warn = "".join(note_html(Note(c["text"], list(c.get("detail") or []))) for c in caveats
                   if c["rank"] == RANKS[DETAILS]) + (f"<ul class='warnings'>{warn}</ul>" if warn else "")
    sections = [("plans", "Plans", plan_tables(doc)), ("answers", "What a planner asks", answers_html(doc)),
                ("timeline", "Over the window", "".join(by.get("timeline", []))),
                ("cost", "Cost", "".join(by.get("cost", []))),
                ("model_error", "The model's error on validation", model_error_html(doc)),
                ("validation", "Validation against a real replay", validation_html(doc)),
                ("estimates", "Estimated capacity beside the roofline", estimates_html(doc)),
                ("capacity", "Capacity measurements", "".join(by.get("capacity", []))),
                ("warnings", "Warnings", warn)]
    page = folder / PAGE
    page.write_text(document("Fleet plan", sub, sections))
    return page
