"""The page: one self-contained HTML file.  plotly's JavaScript is inlined once, in the head;
each figure's JSON sits in a ``<script type="application/json">`` block (``<``, ``>``, ``&``
and the JavaScript line separators escaped, so no text inside can close the script) and one
loop at the end draws them all.  Nothing is fetched: the page opens with the network off.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from harness.report import style

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:1.5em 2em;color:#222;
max-width:1500px}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
nav.toc a{margin-right:1em} .subtitle{color:#555} .subtitle.answer{color:#111;font-weight:600;margin:.2em 0}
details.subtitle{margin:1em 0} details.subtitle summary{cursor:pointer} details.subtitle ul{margin:.3em 0}
table{border-collapse:collapse;font-size:12px;margin:.6em 0} td,th{border:1px solid #ccc;padding:3px 6px;
text-align:right;vertical-align:top} th{background:#f4f4f4}
table.kv td,table.steps td,table.provenance td,table.errors td,table.workload td,table.source-comparison td,
table.ablation td{text-align:left}
td.cmd,td.text{text-align:left;max-width:40em;word-break:break-all}
tr.client-limited{background:#fee} tr.imported{background:#f3f7ff}
td.verdict.a_better,td.verdict.b_better{font-weight:bold} td.ran{color:#0a0} td.skipped{color:#a00}
.warning,ul.warnings li{color:#a00} figure.plot-figure{margin:1em 0 2em 0}
figcaption{font-size:12px;color:#444;max-width:70em} div.plot,div.plot-live{min-height:300px}
form.slo-controls label{margin-right:1.2em} td.moved{font-style:italic;background:#fff8e0}
.table-scroll{overflow-x:auto}
"""

DRAW = """
(function () {
  var divs = document.querySelectorAll("div.plot"), done = [];
  divs.forEach(function (div) {
    var spec = JSON.parse(document.getElementById(div.getAttribute("data-fig")).textContent);
    done.push(Plotly.newPlot(div, spec.data, spec.layout, {displaylogo: false, responsive: true}));
  });
  Promise.all(done).then(function () { document.body.setAttribute("data-plotted", String(divs.length)); });
})();
"""

_JS_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


@dataclass
class Note:
    """A line under the title: one short sentence, the detail folded away (``<details>``)."""

    text: str
    detail: list[str] = field(default_factory=list)
    css: str = ""  # a class beside ``subtitle`` (``answer``: the protocol's answer, set apart)


def note_html(n: str | Note) -> str:
    if isinstance(n, str):
        n = Note(n)
    if not n.text:
        return ""
    cls = f"subtitle {n.css}".strip()
    if not n.detail:
        return f"<p class='{cls}'>{html.escape(n.text)}</p>"
    items = "".join(f"<li>{html.escape(d)}</li>" for d in n.detail)
    return f"<details class='{cls}'><summary>{html.escape(n.text)}</summary><ul>{items}</ul></details>"


def script_json(text: str) -> str:
    """JSON text safe inside <script>: nothing in it can end the element or open a comment."""
    return re.sub("[<>&\u2028\u2029]", lambda m: _JS_UNSAFE[m.group(0)], text)


def figure_html(f: style.Fig, static_files: dict[str, list[str]]) -> str:
    import plotly.io as pio

    spec = script_json(pio.to_json(f.fig, validate=False))
    key = html.escape(f.key)
    links = ""
    if f.key in static_files:
        links = " Static: " + ", ".join(f"<a href='{html.escape(p)}'>{html.escape(p.rsplit('.', 1)[-1].upper())}</a>"
                                         for p in static_files[f.key]) + "."
    notes = " ".join(html.escape(n) for n in f.notes if n)
    return (f"<figure class='plot-figure'><div class='plot' id='fig-{key}' data-fig='figdata-{key}'></div>"
            f"<script type='application/json' id='figdata-{key}'>{spec}</script>"
            f"<figcaption>{notes}{links}</figcaption></figure>")


def document(title: str, subtitle: list[str | Note], sections: list[tuple[str, str, str]]) -> str:
    """``subtitle``: the lines under the title (text, escaped here); ``sections``: (anchor,
    heading, body html already escaped by its builder); a section's id is ``sec-<anchor>``, so
    tables can use the plain names (``#comparison``, ``#runs``)."""
    from plotly.offline import get_plotlyjs

    toc = " ".join(f"<a href='#sec-{html.escape(a)}'>{html.escape(h)}</a>" for a, h, body in sections if body)
    body = "".join(f"<section id='sec-{html.escape(a)}'><h2>{html.escape(h)}</h2>{b}</section>"
                   for a, h, b in sections if b)
    sub = "".join(note_html(s) for s in subtitle if s)
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title><style>{CSS}</style>"
            f"<script>{get_plotlyjs()}</script></head><body>"
            f"<h1>{html.escape(title)}</h1>{sub}<nav class='toc'>{toc}</nav>{body}"
            f"<script>{DRAW}</script></body></html>\n")
