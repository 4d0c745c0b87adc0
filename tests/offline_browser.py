"""Headless Chromium (the system's, /usr/bin/chromium) with the network off, for the tests that
open a page the harness wrote: every request that is not a file is aborted and recorded, and
console errors and warnings, page errors and dialogs are collected for the test to assert on."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@dataclass
class Seen:
    problems: list[str] = field(default_factory=list)   # console errors and warnings, page errors
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)   # anything not a file, aborted


@contextmanager
def offline_page(viewport=(1400, 1000)):
    """(page, seen): a page in an offline context; the browser closes on exit."""
    from playwright.sync_api import sync_playwright

    seen = Seen()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            ctx = browser.new_context(offline=True, viewport={"width": viewport[0], "height": viewport[1]})
            ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                      else (seen.requests.append(route.request.url), route.abort()))
            page = ctx.new_page()
            page.on("console", lambda m: seen.problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: seen.problems.append(f"page error: {e}"))
            page.on("dialog", lambda d: (seen.dialogs.append(d.message), d.dismiss()))
            yield page, seen
        finally:
            browser.close()
