"""Static exports of the report's figures for papers: PNG (300 dpi), SVG and PDF of each, laid
out for a two-column page (``style.paper``: 3.5 in single column, 7.16 in for the wide ones),
written by ``kaleido`` (1.x) driving the system's Chromium, never a downloaded browser:
``BROWSER_PATH`` if set, else ``chromium`` / ``chromium-browser`` / ``google-chrome`` on the
PATH.  Files go to ``figures/`` beside ``report.html`` with ``figures.json`` (title and notes of
each figure, for captions).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from pathlib import Path

from harness.report import style
from harness.results_io import write_json

FORMATS = ("png", "svg", "pdf")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def browser_path() -> str | None:
    env = os.environ.get("BROWSER_PATH")
    if env:
        return env if Path(env).is_file() and os.access(env, os.X_OK) else None
    return next((p for p in (shutil.which(b) for b in BROWSERS) if p), None)


def available() -> tuple[bool, str]:
    """Whether static export can run here, and if not, why (for the report's note)."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False, "the python package kaleido is not installed (pip install 'kaleido>=1.0')"
    if browser_path() is None:
        where = f"BROWSER_PATH={os.environ['BROWSER_PATH']} is not an executable" if os.environ.get("BROWSER_PATH") \
            else "no Chromium or Chrome on the PATH (" + ", ".join(BROWSERS) + "); set BROWSER_PATH"
        return False, where
    return True, ""


def export(figs: list[style.Fig], out_dir, formats=FORMATS, timeout_s: float = 120) -> list[Path]:
    """Write every figure in every format under ``out_dir``; returns the files written.
    Raises RuntimeError naming the figures that failed."""
    import kaleido

    # kaleido and its browser driver log every tab at INFO: under Hydra (root logger at INFO)
    # that was a hundred lines per report in the run's output
    for name in ("kaleido", "choreographer"):
        logging.getLogger(name).setLevel(logging.WARNING)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs, files = [], []
    for f in figs:
        paper = style.paper(f.fig, f.wide, f.height_in)
        w, h = paper.layout.width, paper.layout.height
        for fmt in formats:
            path = out_dir / f"{f.key}.{fmt}"
            opts = {"format": fmt, "width": w, "height": h, "scale": style.PNG_DPI / style.DPI if fmt == "png" else 1}
            jobs.append({"fig": paper, "path": path, "opts": opts})
            files.append(path)

    async def run():
        async with kaleido.Kaleido(n=min(2, os.cpu_count() or 1), timeout=timeout_s, mathjax=False,
                                   path=browser_path()) as k:
            return await k.write_fig_from_object(jobs, cancel_on_error=False)

    errors = asyncio.run(run()) or ()
    missing = [p.name for p in files if not p.exists() or p.stat().st_size == 0]
    if errors or missing:
        raise RuntimeError(f"static export: {len(errors)} error(s), files not written: {', '.join(missing) or 'none'}"
                           + (f"; first error: {errors[0]}" if errors else ""))
    write_json(out_dir / "figures.json", [{"file": f.key, "formats": list(formats), "title": f.title,
                                           "width_in": style.DOUBLE_IN if f.wide else style.SINGLE_IN,
                                           "notes": [n for n in f.notes if n]} for f in figs])
    return files
