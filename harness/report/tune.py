"""tune.html: a tune (tune.json, ``protocols.tune``) as one self-contained page.

The result first, and what it stands on (measurements: the best trial and, with
``protocol.screen=model``, its confirmation); then the trials as measured; then, for a screened
tune, every config's modelled figures (labelled modelled, never measured unless a finalist) and
each finalist's modelled figures beside its measured ones, with the model's validated error
or "not validated".
"""

from __future__ import annotations

from pathlib import Path

from harness.report.page import Note, document
from harness.report.tables import esc, fmt, table
from harness.results_io import read_json

PAGE = "tune.html"


def _params(p: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())


def result_html(rec: dict) -> str:
    best = rec.get("best")
    if not best:
        return f"<p class='warning'><b>No result stands:</b> {esc(rec.get('best_note') or '')}</p>"
    conf = (best.get("confirmation") or {}).get("said")
    return (f"<p><b>Best (measured): trial {esc(best['trial'])}, {esc(_params(best['params']))}</b>: "
            f"{esc(rec['objective'])} {esc(fmt(best['objective']))} at max load under the SLO "
            f"{esc(fmt(best['max_load_under_slo']))}" + (f"; {esc(conf)}" if conf else "") + ".</p>")


def trials_html(rec: dict) -> str:
    keys = [k["key"] for k in rec["space"]]
    rows = [[esc(t["trial"]), *(esc(fmt(t["params"].get(k))) for k in keys), esc(fmt(t.get("feasible"))),
             esc(fmt(t.get("max_load_under_slo"))), esc(fmt(t.get("cost_per_mtok_good"))),
             esc(fmt(t.get("objective") if t.get("feasible") else None)), esc(t.get("why") or "")]
            for t in rec["trials"]]
    return table(["trial", *keys, "feasible", "max load (measured)", "cost / M good tok (measured)",
                  f"{rec['objective']} (measured)", "why not"], rows, "trials")


def screen_html(rec: dict) -> str:
    s = rec.get("screen")
    if not s:
        return ""
    keys = [k["key"] for k in rec["space"]]
    finalists = {_params(f["params"]) for f in s["finalists"]}
    rows = [[esc(fmt(c.get("rank"))), *(esc(fmt(c["params"].get(k))) for k in keys),
             esc(fmt(c["max_load_under_slo"])), esc(fmt(c["objective"] if c["feasible"] else None)),
             esc("finalist: measured" if _params(c["params"]) in finalists else
                 "modelled only, not measured" if c["feasible"] else c.get("why") or "")]
            for c in sorted(s["configs"], key=lambda c: (c.get("rank") is None, c.get("rank") or 0))]
    html = (f"<p>Every config of the space on the engine's scheduler model ({esc(s['model']['profile'])}, "
            f"{len(s['rates'])} rates from {esc(fmt(s['rates'][0]))} to {esc(fmt(s['rates'][-1]))} req/s, "
            f"{esc(s['requests_per_rate'])} requests each): <b>modelled figures, not measurements</b>.</p>")
    html += table(["rank", *keys, "max load (modelled)", f"{rec['objective']} (modelled)", "note"], rows, "screen")
    rows = []
    for f in s["finalists"]:
        me = f["measured"] or {}
        rows.append([esc(fmt(f["trial"])), *(esc(fmt(f["params"].get(k))) for k in keys),
                     esc(fmt(f["modelled"]["max_load_under_slo"])), esc(fmt(me.get("max_load_under_slo"))),
                     esc(fmt(f["modelled"]["objective"])),
                     esc(fmt(me.get("objective") if me.get("feasible") else None)),
                     esc("not validated" if f["disagrees"] is None and f["measured"] else fmt(f["disagrees"])),
                     esc(f.get("note") or "")])
    html += (f"<h3>Finalists: modelled beside measured (the model: {esc(s['validated'])})</h3>"
             + table(["trial", *keys, "max load (modelled)", "max load (measured)", f"{rec['objective']} (modelled)",
                      f"{rec['objective']} (measured)", "disagrees", "note"], rows, "finalists"))
    return html


def write_tune_page(folder: str | Path) -> Path:
    folder = Path(folder)
    rec = read_json(folder / "tune.json")
    sub = [f"Objective {rec['objective']} ({rec['direction']}) at the max load under the SLO; "
           f"{rec['evaluated']} config(s) measured, {rec['feasible']} feasible.",
           Note("The result stands on measurements" + (", screened on the model first." if rec.get("screen") else "."),
                [f"space: {', '.join(k['key'] for k in rec['space'])}", f"status: {rec['status']}"])]
    sections = [("result", "Result", result_html(rec)), ("trials", "Trials (measured)", trials_html(rec)),
                ("screen", "Screen on the model (modelled)", screen_html(rec))]
    page = folder / PAGE
    page.write_text(document("Tune", sub, [s for s in sections if s[2]]))
    return page
