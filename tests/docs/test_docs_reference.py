"""The configuration reference (docs/hooks/config_reference.py, run by mkdocs at build time)
lists every field of every schema in conf/schema/ under its full key, with the range
``validate`` checks and the meaning written beside the field."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from conf.schema import SCHEMAS, Load, Root

HOOK = Path(__file__).resolve().parents[2] / "docs" / "hooks" / "config_reference.py"


def render() -> str:
    spec = importlib.util.spec_from_file_location("config_reference", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.render()


def keys(cls, prefix: str):
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            yield from keys(type(default), f"{prefix}.{f.name}")
        else:
            yield f"{prefix}.{f.name}"


def test_every_schema_field_has_a_row():
    page = render()
    rows = {line.split("|")[1].strip().strip("`") for line in page.splitlines() if line.startswith("| `")}
    expected = {k for group, schemas in SCHEMAS.items() for cls in schemas.values() for k in keys(cls, group)}
    expected |= {k.removeprefix(".") for k in keys(Root, "") if k.split(".")[1] not in SCHEMAS}
    assert expected - rows == set()


def test_a_row_carries_type_range_default_and_meaning():
    page = render()
    row = next(line for line in page.splitlines() if line.startswith("| `load.rate` |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    rate = next(f for f in dataclasses.fields(Load) if f.name == "rate")
    assert cells == ["`load.rate`", "`float` or null", f"&gt; {rate.metadata['gt']}", "`null`", "open loop: requests/s"]
    # a choice, and a subclass's own comment (blocks) over the one it inherits (runs)
    assert "| `load.kind` | `str` | one of `poisson`, `constant`, `gamma`, `concurrency`, `trace` |" in page
    assert any(line.startswith("| `protocol.repeats` |") and line.rstrip().endswith("| blocks |")
               for line in page.splitlines())
