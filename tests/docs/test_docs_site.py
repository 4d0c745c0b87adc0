"""The documentation site, built for real: `mkdocs build --strict` of mkdocs.yml into a
temporary folder, then the configuration reference opened in headless Chromium (the
system's, /usr/bin/chromium, network off). The page must render with its title, a heading,
the site's navigation and the generated table holding a real key (`load.rate`, with the range
and default conf/schema/ gives it)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [pytest.mark.docs,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (.ci/run installs Debian's)")]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_built_reference_renders_in_chromium(site):
    from playwright.sync_api import sync_playwright

    from conf.schema import Load

    rate = next(f for f in dataclasses.fields(Load) if f.name == "rate")
    page_path = site / "reference" / "configuration.html"
    assert page_path.exists(), sorted(p.name for p in site.iterdir())
    problems, fetched = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            ctx = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
            ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                      else (fetched.append(route.request.url), route.abort()))
            page = ctx.new_page()
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.goto(page_path.resolve().as_uri())
            page.wait_for_selector("nav.md-nav", timeout=30_000)
            title = page.title()
            heading = page.inner_text("article h1")
            nav = page.evaluate("() => Array.from(document.querySelectorAll('nav.md-nav--primary a.md-nav__link'))"
                                ".map(a => a.textContent.trim())")
            row = page.evaluate("""() => {
                for (const tr of document.querySelectorAll('article table tr')) {
                    const cells = Array.from(tr.querySelectorAll('td')).map(td => td.textContent.trim());
                    if (cells[0] === 'load.rate') return cells;
                }
                return null; }""")
            visible = page.is_visible("article table")
        finally:
            browser.close()
    assert not problems, problems
    assert title == "Configuration - tokenfactory", title   # the nav entry, then the site name
    assert heading.strip().rstrip("¶").strip() == "Configuration reference", heading
    for entry in ("Getting started", "Tutorial, the seven steps", "Metric definitions", "Configuration"):
        assert entry in nav, nav
    assert visible
    assert row is not None, "no row for load.rate in the configuration reference"
    key, typ, rng, default, meaning = row
    assert typ == "float or null"
    assert rng == f"> {rate.metadata['gt']}"
    assert default == "null" and rate.default is None
    assert "requests/s" in meaning
