"""MkDocs hook: the configuration reference, generated from ``conf/schema/`` at build time.

Every key of every config group, with its type, range, default and meaning, is read from the
schema's dataclasses (types and defaults), their field metadata (the ranges ``validate``
checks: ``ge``/``gt``/``le``/``lt``, ``choices``, ``folder``, ``each``) and the source's
comments (the meaning: a field's trailing comment, and a comment block right above it) and
docstrings.  The group options (``conf/<group>/*.yaml``) are listed with the values each one
sets on top of its schema.  Nothing is written to ``docs/``: the page exists only in the build,
so it cannot drift from the code.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import sys
import tokenize
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGE = "reference/configuration.md"


# ------------------------------------------------------------------------------------ comments
def _comments(source: str) -> dict[int, str]:
    """line number -> the text of the comment on that line."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


def field_notes(source: str) -> dict[tuple[str, str], str]:
    """(class name, field name) -> its meaning: the comment block just above the field (no
    blank line between) and the comments on the field's own lines."""
    comments = _comments(source)
    lines = source.splitlines()
    notes: dict[tuple[str, str], str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            above = []
            n = stmt.lineno - 1
            while n >= 1 and lines[n - 1].strip().startswith("#"):
                above.insert(0, comments.get(n, ""))
                n -= 1
            own = [comments[i] for i in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1) if i in comments]
            text = " ".join(t for t in above + own if t and not set(t) <= {"-"})
            if text:
                notes[(node.name, stmt.target.id)] = text
    return notes


# ------------------------------------------------------------------------------------ rendering
def _cell(text: str) -> str:
    """Text for a table cell: pipes escaped, and ``<`` / ``>`` outside code spans (a meaning such as
    ``results/<experiment>/`` is not an HTML tag)."""
    parts = str(text).replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def _type(annotation: str) -> str:
    t = str(annotation).replace("typing.", "")
    nullable = t.startswith("Optional[")
    if nullable:
        t = t[len("Optional["):-1]
    t = t.replace("List[", "list[").replace("Dict[", "dict[")
    if t == "Any":
        t = "any"
    return f"`{t}` or null" if nullable else f"`{t}`"


def _range(meta: dict) -> str:
    parts = []
    for rule, word in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
        if rule in meta:
            parts.append(f"{word} {meta[rule]}")
    if "choices" in meta:
        parts.append("one of " + ", ".join(f"`{c}`" for c in meta["choices"]))
    if meta.get("folder"):
        parts.append("a relative folder name, no `..`")
    if "each" in meta:
        parts.append("every value " + _range(meta["each"]))
    return ", ".join(parts)


def _value(v: Any) -> str:
    if v is None:
        return "`null`"
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if dataclasses.is_dataclass(v):
        return "see below"
    if isinstance(v, list) and v and dataclasses.is_dataclass(v[0]):
        return f"{len(v)} entries (below)"
    if isinstance(v, str):
        return f'`"{v}"`' if v == "" else f"`{v}`"
    return f"`{v!r}`" if isinstance(v, (list, dict)) else f"`{v}`"


def _default(f: dataclasses.Field, missing) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return missing


class Reference:
    def __init__(self):
        sys.path.insert(0, str(ROOT))
        from omegaconf import MISSING

        import conf.schema as schema

        self.schema = schema
        self.MISSING = MISSING
        self.notes = {}  # every module of the package: one a config group (conf/schema/<group>.py)
        for module in sorted(Path(schema.__file__).parent.glob("*.py")):
            self.notes.update(field_notes(module.read_text()))
        self.classes = {name: obj for name, obj in vars(schema).items()
                        if isinstance(obj, type) and dataclasses.is_dataclass(obj)}

    def note(self, cls: type, name: str) -> str:
        for klass in cls.__mro__:  # a subclass's own comment wins over the one it inherits
            if (klass.__name__, name) in self.notes:
                return self.notes[(klass.__name__, name)]
        return ""

    def _element(self, annotation: str) -> type | None:
        """The dataclass a ``List[X]`` field holds, if X is one of the schema's."""
        t = str(annotation)
        if t.startswith("List[") and t[5:-1] in self.classes:
            return self.classes[t[5:-1]]
        return None

    def rows(self, cls: type, prefix: str) -> tuple[list[str], list[tuple[str, type]]]:
        """Table rows of ``cls``'s scalar fields, and its nested dataclass fields to recurse into."""
        rows, nested = [], []
        for f in dataclasses.fields(cls):
            key = f"{prefix}.{f.name}" if prefix else f.name
            default = _default(f, self.MISSING)
            element = self._element(f.type)
            sub = type(default) if dataclasses.is_dataclass(default) else self.classes.get(str(f.type))
            if sub is not None and dataclasses.is_dataclass(sub):
                nested.append((key, sub))
                continue
            if default == self.MISSING:
                shown = "set by the option"
            else:
                shown = _value(default)
            rows.append(f"| `{key}` | {_type(f.type)} | {_cell(_range(dict(f.metadata)))} | {_cell(shown)} | "
                        f"{_cell(self.note(cls, f.name))} |")
            if element is not None:
                nested.append((f"{key}[]", element))
        return rows, nested

    def options(self, group: str) -> tuple[list[tuple[str, str, dict]], str | None]:
        """(option, schema name, the values its YAML sets) per file of conf/<group>/, and the
        root config's default option."""
        found = []
        for path in sorted((ROOT / "conf" / group).glob("*.yaml")):
            data = yaml.safe_load(path.read_text()) or {}
            defaults = data.pop("defaults", []) or []
            schema = next((d for d in defaults if isinstance(d, str) and d.endswith("schema")), "")
            found.append((path.stem, schema, data))
        root = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())
        chosen = next((d[group] for d in root.get("defaults", []) if isinstance(d, dict) and group in d), None)
        return found, chosen

    def page(self) -> str:
        s = self.schema
        out = ["# Configuration reference", "",
               "Generated from `conf/schema/` when the site is built (`docs/hooks/config_reference.py`): "
               "every key with its type, the range `conf.schema.validate` checks right after Hydra composes the "
               "config (an override outside it stops the run with the full key named), the schema's default "
               "and the meaning written beside the field.  A group's option (`group=name`, a file "
               "`conf/<group>/<name>.yaml`) starts from its schema and sets only what differs: the values each "
               "option sets are listed under its group, and they win over the schema's default.", "",
               "Override a key with `group.key=value` (`load.rate=4`), pick an option with `group=name` "
               "(`load=concurrency`); a key that is not in the schema is refused with the known keys listed.", ""]
        root_fields = {f.name: f for f in dataclasses.fields(s.Root)}
        out.append("## Top level")
        out.append("")
        rows, nested = self.rows(s.Root, "")
        out += ["| key | type | range | default | meaning |", "|---|---|---|---|---|",
                *[r for r in rows if not any(r.startswith(f"| `{g}`") for g in s.SCHEMAS)], ""]
        for group, schemas in s.SCHEMAS.items():
            out += [f"## `{group}`", ""]
            found, chosen = self.options(group)
            if found:
                out += [f"Options (`{group}=NAME`; default `{chosen}`):", "",
                        "| option | schema | sets |", "|---|---|---|"]
                for name, schema_name, data in found:
                    cls = schemas.get(schema_name)
                    sets = ", ".join(f"`{k}={_yaml(v)}`" for k, v in _flatten(data))
                    out.append(f"| `{name}` | {cls.__name__ if cls else schema_name} | "
                               f"{_cell(sets) or 'nothing: the schema defaults'} |")
                out.append("")
            for schema_name, cls in schemas.items():
                users = [n for n, sn, _ in found if sn == schema_name]
                title = f"### {cls.__name__}" + (f" (options: {', '.join(f'`{u}`' for u in users)})" if users else "")
                out += [title, ""]
                doc = " ".join((cls.__doc__ or "").split())
                if doc and not doc.startswith(cls.__name__ + "("):
                    out += [doc, ""]
                self.section(cls, group, out)
        for key, sub in nested:
            if key in s.SCHEMAS or key not in root_fields:
                continue
            out += [f"## `{key}`", ""]
            doc = " ".join((sub.__doc__ or "").split())
            if doc and not doc.startswith(sub.__name__ + "("):
                out += [doc, ""]
            self.section(sub, key, out)
        return "\n".join(out) + "\n"

    def section(self, cls: type, prefix: str, out: list[str]) -> None:
        """One table for ``cls`` and every dataclass nested in it, keys in full."""
        rows: list[str] = []

        def walk(c: type, p: str) -> None:
            r, nested = self.rows(c, p)
            rows.extend(r)
            for key, sub in nested:
                walk(sub, key)

        walk(cls, prefix)
        out += ["| key | type | range | default | meaning |", "|---|---|---|---|---|", *rows, ""]


def _flatten(data: Any, prefix: str = ""):
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, data


def _yaml(v: Any) -> str:
    """A value as it is written in an override (``true``, ``null``, ``[1, 2]``)."""
    return yaml.safe_dump(v, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


def render() -> str:
    return Reference().page()


# ------------------------------------------------------------------------------------ the hook
def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files
