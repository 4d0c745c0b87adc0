"""The report's SLO and price controls: the reader sets TTFT, TPOT and E2E thresholds and a price
per device-hour, and the page recomputes, for every run and load point, SLO attainment, goodput, good
output tokens per second and the cost per million good output tokens, redrawing its figure and
its two tables.  Each run is carried as its ``slo_histogram`` (no per-request rows); the page's
script does what ``slo_histogram.bounds`` does and shows the midpoint with its error bound.

The definitions are those of ``metrics.summary`` and ``metrics.cost``: good = completed and every
threshold set holds (inclusive); attainment = good / measured requests; goodput = good /
``duration_s``; good output tokens/s = their output tokens / ``duration_s``; cost per million good
tokens = 1e6 x bill / good output tokens, the bill being the run's recorded ``cost_total`` or, with
a price set, ``metrics.cost.priced_cost``: price x the run's device-seconds / 3600, so a run of two
replicas (or two GPUs a replica) pays twice what one pays (``device_seconds``).  Load points: means
over repeats, the cost as the ratio of totals (``data.RATIOS``).  The error the page states: half the
undecided requests (as a share of the measured ones) and half the undecided good tokens (as a share
of the run's output tokens), each at most ``slo_histogram.WORST_CASE_PP``.
"""

from __future__ import annotations

import json

from harness.report import slo_histogram, style
from harness.report.data import ReportData, Run, number
from harness.report.figures_load import x_title
from harness.report.page import script_json
from harness.report.tables import esc, table
from harness.results_io import CONFIG, REQUESTS, read_yaml
from metrics.cost import devices_per_replica

METRICS = (("attainment", "SLO attainment (%)"), ("goodput", "goodput (good requests/s)"),
           ("good_tps", "good output tokens/s"), ("cost", "cost per M good output tokens"))

SCRIPT = r"""
(function () {
  var P = JSON.parse(document.getElementById("slo-controls-data").textContent);
  var inputs = {ttft_ms: "slo-ttft", tpot_ms: "slo-tpot", e2el_ms: "slo-e2el", price: "slo-price"};
  var dims = ["ttft_ms", "tpot_ms", "e2el_ms"];
  function decode(text) {  // base64 LEB128 varints (slo_histogram.encode)
    var raw = atob(text), out = [], v = 0, scale = 1;
    for (var p = 0; p < raw.length; p++) {
      var b = raw.charCodeAt(p);
      v += (b & 127) * scale;
      if (b < 128) { out.push(v); v = 0; scale = 1; } else { scale *= 128; }
    }
    return out;
  }
  P.runs.forEach(function (r) {  // decode each run's cells once: bin indices per dimension
    var h = r.hist, s1 = h.edges.tpot_ms.lo.length + 1, s2 = h.edges.e2el_ms.lo.length + 1;
    var delta = decode(h.cells.delta), m = delta.length, flat = 0;
    h.cells = {count: decode(h.cells.count), tokens: decode(h.cells.tokens)};
    r.ix = [new Int32Array(m), new Int32Array(m), new Int32Array(m)];
    for (var c = 0; c < m; c++) {
      flat += delta[c];
      r.ix[2][c] = flat % s2; r.ix[1][c] = Math.floor(flat / s2) % s1; r.ix[0][c] = Math.floor(flat / (s1 * s2));
    }
  });
  function value(id) {
    var v = parseFloat(document.getElementById(id).value);
    return isFinite(v) && v >= 0 ? v : null;
  }
  function states(e, limit, nanPasses) {  // per bin, bin 0 first: 0 pass, 1 straddle, 2 fail
    var out = new Int8Array(e.lo.length + 1);
    if (limit === null) return out;
    out[0] = nanPasses ? 0 : 2;
    for (var b = 0; b < e.lo.length; b++) out[b + 1] = e.hi[b] <= limit ? 0 : (e.lo[b] > limit ? 2 : 1);
    return out;
  }
  function runValues(r, lim, price) {
    var h = r.hist, st = dims.map(function (d) { return states(h.edges[d], lim[d], d === "tpot_ms"); });
    var low = 0, high = 0, tl = 0, th = 0, cnt = h.cells.count, tok = h.cells.tokens;
    for (var c = 0; c < cnt.length; c++) {
      var w = Math.max(st[0][r.ix[0][c]], st[1][r.ix[1][c]], st[2][r.ix[2][c]]);
      if (w === 0) { low += cnt[c]; tl += tok[c]; }
      if (w <= 1) { high += cnt[c]; th += tok[c]; }
    }
    var good = (low + high) / 2, tokens = (tl + th) / 2, dur = r.duration_s;
    // metrics.cost.priced_cost: the price per device-hour x the devices and hours this run was billed for
    var bill = price === null ? r.cost_total : (r.device_s === null ? null : price * r.device_s / 3600);
    return {attainment: h.n ? 100 * good / h.n : null, error: h.n ? 100 * (high - low) / 2 / h.n : 0,
            tok_error: h.tokens ? 100 * (th - tl) / 2 / h.tokens : 0, tok_off: (th - tl) / 2, all_tokens: h.tokens,
            good: good, tokens: tokens, bill: bill,
            goodput: dur > 0 ? good / dur : null, good_tps: dur > 0 ? tokens / dur : null,
            cost: bill === null ? null : (tokens > 0 ? 1e6 * bill / tokens : Infinity)};
  }
  function mean(xs) {
    xs = xs.filter(function (x) { return x !== null && isFinite(x); });
    return xs.length ? xs.reduce(function (a, b) { return a + b; }, 0) / xs.length : null;
  }
  function pointValues(g, per) {
    var vs = g.runs.map(function (i) { return per[i]; }), bills = 0, toks = 0, billed = true, off = 0, all = 0;
    vs.forEach(function (v) {
      off += v.tok_off; all += v.all_tokens;
      if (v.bill === null) billed = false; else { bills += v.bill; toks += v.tokens; }
    });
    return {attainment: mean(vs.map(function (v) { return v.attainment; })),
            error: Math.max.apply(null, vs.map(function (v) { return v.error; })),
            tok_error: all ? 100 * off / all : 0,
            goodput: mean(vs.map(function (v) { return v.goodput; })),
            good_tps: mean(vs.map(function (v) { return v.good_tps; })),
            cost: billed ? (toks > 0 ? 1e6 * bills / toks : Infinity) : null};
  }
  function show(v) {
    if (v === null) return "n/a";
    if (!isFinite(v)) return "\u221e";
    return Number(v.toPrecision(4)).toString();
  }
  function fill(tbl, vals) {
    document.querySelectorAll("#" + tbl + " td[data-metric]").forEach(function (td) {
      var v = vals[+td.getAttribute("data-index")][td.getAttribute("data-metric")];
      td.setAttribute("data-value", v === null ? "" : String(v));
      var pm = td.getAttribute("data-metric") === "error" || td.getAttribute("data-metric") === "tok_error";
      td.textContent = pm ? "\u00b1" + show(v) : show(v);
    });
  }
  // the runs and per-point tables further down: their goodput, attainment and cost cells follow the
  // controls once moved (marked, intervals dropped); back at the experiment's SLO they show its numbers
  var byKey = {}, byGroup = {};
  P.runs.forEach(function (r, i) { byKey[r.key] = i; });
  P.points.forEach(function (g, i) { byGroup[g.group] = i; });
  function liveCells(moved, per, pts) {
    document.querySelectorAll("td[data-live]").forEach(function (td) {
      if (!td.hasAttribute("data-orig")) td.setAttribute("data-orig", td.textContent);
      var m = td.getAttribute("data-live"), run = td.getAttribute("data-run"), g = td.getAttribute("data-group");
      var v = run !== null ? (run in byKey ? per[byKey[run]] : null) : (g in byGroup ? pts[byGroup[g]] : null);
      if (!moved || v === null) {
        td.textContent = td.getAttribute("data-orig"); td.classList.remove("moved"); td.removeAttribute("title");
        return;
      }
      var x = v[m];
      td.textContent = show(m === "attainment" && x !== null ? x / 100 : x);
      td.classList.add("moved");
      td.setAttribute("title", "at the SLO and price set in 'Your SLO and price' (no interval)");
    });
  }
  // the vs-load figures elsewhere whose lines carry meta.live (figures_load.curve): redrawn at the SLO
  // and price set, their bands, error bars and the lines not recomputed (meta.stale) hidden meanwhile
  function liveFigures(moved, pts) {
    document.querySelectorAll("div.plot").forEach(function (div) {
      if (!div.data || !div.data.some(function (t) { return t.meta && (t.meta.live || t.meta.stale); })) return;
      var orig = div._sloOrig || JSON.parse(document.getElementById(div.getAttribute("data-fig")).textContent);
      div._sloOrig = orig;
      var data = orig.data.map(function (t) {
        if (!moved || !t.meta) return t;
        if (t.meta.stale) return Object.assign({}, t, {visible: false});
        if (!t.meta.live) return t;
        var ys = t.meta.groups.map(function (g) {
          var y = g in byGroup ? pts[byGroup[g]][t.meta.live] : null;
          return y !== null && isFinite(y) ? y : null;
        });
        return Object.assign({}, t, {y: ys, error_y: {visible: false}, hoverinfo: "x+y+name"});
      });
      Plotly.react(div, data, orig.layout, {displaylogo: false, responsive: true});
    });
  }
  var spec = JSON.parse(document.getElementById("figdata-slo_controls").textContent);
  function update() {
    var lim = {ttft_ms: value(inputs.ttft_ms), tpot_ms: value(inputs.tpot_ms), e2el_ms: value(inputs.e2el_ms)};
    var price = value(inputs.price);
    var per = P.runs.map(function (r) { return runValues(r, lim, price); });
    var pts = P.points.map(function (g) { return pointValues(g, per); });
    fill("slo-runs", per); fill("slo-points", pts);
    var worst = Math.max.apply(null, per.map(function (v) { return v.error; }).concat([0]));
    document.getElementById("slo-bound").textContent = show(worst);
    var worstTok = Math.max.apply(null, per.map(function (v) { return v.tok_error; }).concat([0]));
    document.getElementById("slo-tok-bound").textContent = show(worstTok);
    var moved = price !== null || dims.some(function (d) { return lim[d] !== P.slo[d]; });
    liveCells(moved, per, pts);
    liveFigures(moved, pts);
    var data = spec.data.map(function (t, k) {
      var m = P.traces[k], ys = m.points.map(function (i) { var y = pts[i][m.metric]; return isFinite(y) ? y : null; });
      return Object.assign({}, t, {y: ys});
    });
    var div = document.getElementById("fig-slo_controls");
    return Plotly.react(div, data, spec.layout, {displaylogo: false, responsive: true}).then(function () {
      var n = +(document.body.getAttribute("data-slo-updates") || 0) + 1;
      document.body.setAttribute("data-slo-updates", String(n));
    });
  }
  Object.keys(inputs).forEach(function (k) {
    var el = document.getElementById(inputs[k]);
    el.addEventListener("input", update); el.addEventListener("change", update);
  });
  update();
})();
"""


def _runs(d: ReportData) -> list:
    """(run, histogram) of every run with per-request records, in the tables' order."""
    out = []
    for g in d.groups():
        for r in g.runs:
            h = slo_histogram.read(r.dir / REQUESTS)
            if h is not None and h["n"]:
                out.append((r, h))
    return out


def device_seconds(run: Run) -> float | None:
    """The device-seconds a price per device-hour bills this run for (``metrics.cost.priced_cost``):
    its recorded ``cost_device_seconds``; for a summary written before that was recorded, the
    replica-seconds it was billed for (``cost_replica_seconds``, else ``cost_replicas`` x ``window_s``)
    x its cost profile's GPUs a replica (``config.yaml``'s ``cost.num_gpus``, one where it names none);
    None without a window."""
    s = run.summary
    recorded = number(s.get("cost_device_seconds"))
    if recorded is not None:
        return recorded
    window = number(s.get("window_s"))
    replica_s = number(s.get("cost_replica_seconds"))
    if replica_s is None:
        replica_s = None if window is None else (number(s.get("cost_replicas")) or 1.0) * window
    if replica_s is None:
        return None
    cfg = read_yaml(run.dir / CONFIG, {})
    cost = cfg.get("cost") if isinstance(cfg, dict) else None
    gpus = number(cost.get("num_gpus")) if isinstance(cost, dict) else None
    return devices_per_replica(int(gpus or 0)) * replica_s


def _input(ident: str, label: str, value, unit: str, placeholder: str) -> str:
    v = "" if number(value) is None else f"{number(value):g}"
    return (f"<label>{esc(label)} <input type='number' id='{ident}' min='0' step='any' value='{esc(v)}' "
            f"placeholder='{esc(placeholder)}' style='width:7em'> {esc(unit)}</label> ")


def section(d: ReportData, colours: dict) -> str:
    """The controls, the statement of what they recompute and how exactly, the figure and the
    tables; "" when no run has per-request records."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    runs = _runs(d)
    if not runs:
        return ""
    index = {id(r): i for i, (r, _) in enumerate(runs)}
    payload_runs = [{"hist": h, "key": d.run_key(r), "duration_s": number(r.summary.get("duration_s")),
                     "window_s": number(r.summary.get("window_s")), "device_s": device_seconds(r),
                     "cost_total": number(r.summary.get("cost_total"))}
                    for r, h in runs]
    points, point_rows = [], []
    for gi, g in enumerate(d.groups()):
        members = [index[id(r)] for r in g.runs if id(r) in index]
        if members:
            points.append({"x": g.x, "runs": members, "group": gi})
            point_rows.append(g)
    # the figure: one line per series in each panel, over the load points the vs-load figures place
    fig = make_subplots(rows=2, cols=2, subplot_titles=[t for _, t in METRICS], vertical_spacing=0.14)
    traces = []
    on_axis = {(g.series, g.label) for s in d.series for g in d.on_axis(s)}
    for s in d.series:
        pts = [i for i, g in enumerate(point_rows) if g.series == s and (g.series, g.label) in on_axis]
        if not pts:
            continue
        for k, (metric, _) in enumerate(METRICS):
            fig.add_trace(go.Scatter(x=[points[i]["x"] for i in pts], y=[None] * len(pts), mode="lines+markers",
                                     name=style.text(s), legendgroup=style.text(s), showlegend=k == 0,
                                     line=dict(color=colours[s], width=1.8), marker=dict(size=7, color=colours[s])),
                          row=k // 2 + 1, col=k % 2 + 1)
            traces.append({"metric": metric, "points": pts})
    style.base_layout(fig, "At the SLO and price set above", "", "")
    fig.update_layout(height=640)
    for k in range(4):
        fig.update_xaxes(title_text=x_title(d), row=k // 2 + 1, col=k % 2 + 1)
    import plotly.io as pio

    slo = d.slo
    payload = {"runs": payload_runs, "points": points, "traces": traces,
               "slo": {k: number(slo.get(k)) for k, _ in slo_histogram.DIMS}}
    set_ = ", ".join(f"{k[:-3].upper()} ≤ {number(v):g} ms" for k, v in slo.items()
                     if k.endswith("_ms") and number(v) is not None) or "none"
    currency = next((r.summary.get("cost_currency") for r in d.ours if r.summary.get("cost_currency")), "")
    controls = ("<form class='slo-controls' onsubmit='return false'>"
                + _input("slo-ttft", "TTFT ≤", slo.get("ttft_ms"), "ms", "no SLO")
                + _input("slo-tpot", "TPOT ≤", slo.get("tpot_ms"), "ms", "no SLO")
                + _input("slo-e2el", "E2E ≤", slo.get("e2el_ms"), "ms", "no SLO")
                + _input("slo-price", "price", None, f"{currency} per device-hour".strip(), "recorded bill")
                + "</form>")
    text = (f"<p>Set the thresholds (empty: no SLO on that latency) and a price per device-hour (a GPU-hour; "
            f"empty: each run's recorded bill, {esc(currency or 'its currency')}). With a price set each run is "
            "billed as it ran: the price × its devices (its cost profile's GPUs a replica, or one a replica where "
            "the profile names none) × the replicas it was billed for × its full observation window, so a config "
            "of two replicas pays twice what one of one replica pays. Every number in the "
            "figure and the two tables below is recomputed in the page for every run and load point: SLO attainment "
            "(completed requests meeting every threshold set, inclusive, over all measured requests), goodput "
            "(those requests per second of the run's duration), good output tokens per second, and the cost per "
            "million good output tokens (bill / good output tokens). Load points: "
            "means over repeats, the cost as the ratio of totals. Once moved, the goodput, attainment and cost cells "
            "of the Runs section's two tables follow too (in italics, their intervals dropped), and so do the lines "
            "of the goodput, SLO attainment and cost figures against offered load (their bands and error bars, and "
            "the lines not recomputed, hidden); back at the experiment's SLO with no price set they show its numbers "
            "again.</p>"
            f"<p class='warning'>Intervals and verdicts elsewhere on this page (bands, the comparison, the highest "
            f"load meeting the SLO) hold for the SLO the experiment ran with ({esc(set_)}); the controls recompute "
            "point values only, without intervals.</p>"
            "<p>Exact at the data's resolution: each run is carried as a histogram of its requests' (TTFT, TPOT, "
            f"E2E) in bins of at most 1/{slo_histogram.BINS} of its requests and (but for a bin of one request) "
            f"1/{slo_histogram.BINS} of its output tokens per latency, with the requests and output tokens in each "
            "cell. A threshold falling inside a bin leaves that bin's requests undecided; the page shows the "
            "midpoint, so the attainment shown (and goodput) is off from the exact one by at most half the undecided "
            "share of requests: ± pp per run in the table, at most <span id='slo-bound'></span> pp at the "
            f"thresholds set and never more than {slo_histogram.WORST_CASE_PP:g} pp. Good output tokens (and good "
            "tokens/s) are off by at most half the undecided tokens: ± tok %, a share of the run's (the load "
            "point's) output tokens, at most <span id='slo-tok-bound'></span> % at the thresholds set and never "
            f"more than {slo_histogram.WORST_CASE_PP:g} % of them; the cost per million good tokens is the bill over "
            "that midpoint, so the exact one lies between the bill over the good tokens plus and minus that error. "
            f"A run of fewer than {2 * slo_histogram.BINS} requests is exact (bins of one request, kept exactly).</p>")
    run_rows = [[esc(r.series), esc(r.label), esc(r.block if r.config else (r.repeat if r.repeats > 1 else ""))]
                + [f"<td data-index='{i}' data-metric='{m}' data-run='{esc(d.run_key(r))}'></td>"
                   for m in ("attainment", "error", "goodput", "good_tps", "tok_error", "cost")]
                for i, (r, _) in enumerate(runs)]
    point_cells = [[esc(g.series), esc(g.label), esc(len(points[i]["runs"]))]
                   + [f"<td data-index='{i}' data-metric='{m}'></td>"
                      for m in ("attainment", "error", "goodput", "good_tps", "tok_error", "cost")]
                   for i, g in enumerate(point_rows)]
    head = ["SLO attainment %", "± pp", "goodput req/s", "good out tok/s", "± tok %", "cost / M good tok"]
    spec = script_json(pio.to_json(fig, validate=False))
    return (controls + text
            + "<figure class='plot-figure'><div class='plot-live' id='fig-slo_controls'></div>"
            f"<script type='application/json' id='figdata-slo_controls'>{spec}</script></figure>"
            + "<p>Per load point:</p><div class='table-scroll'>"
            + table(["series", "load point", "repeats"] + head, point_cells, "slo-points", None, "slo-points")
            + "</div><p>Every run:</p><div class='table-scroll'>"
            + table(["series", "load point", "block / repeat"] + head, run_rows, "slo-runs", None, "slo-runs")
            + "</div>"
            + f"<script type='application/json' id='slo-controls-data'>"
              f"{script_json(json.dumps(payload, separators=(',', ':')))}</script>"
            + f"<script>{SCRIPT}</script>")
