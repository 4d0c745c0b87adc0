"""The metric definitions page (docs/metrics.md) names the function in metrics/ that computes
each metric: every such name must import, so a rename or a move fails here until the page
follows it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
NAME = re.compile(r"`(metrics(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")


def named_functions() -> list[str]:
    return sorted(set(NAME.findall(PAGE.read_text())))


def resolve(dotted: str):
    """The object a dotted ``metrics.module[.sub].name`` names: the longest importable module
    prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_the_page_names_functions():
    names = named_functions()
    # the page's tables name the per-request, summary, cost, statistics and gate functions
    assert len(names) >= 30, names
    assert "metrics.request_metrics.ttft_s" in names


def test_every_named_metric_function_exists():
    missing = []
    for dotted in named_functions():
        try:
            obj = resolve(dotted)
        except (ImportError, AttributeError) as e:
            missing.append(f"{dotted}: {e}")
            continue
        if not callable(obj):
            missing.append(f"{dotted}: not a function or class")
    assert not missing, "docs/metrics.md names what metrics/ does not define:\n" + "\n".join(missing)
