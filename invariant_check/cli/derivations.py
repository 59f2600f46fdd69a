"""`invariant-check derivations`: the derived fields the rules know, and where the code shows
each (what IC004 checks a draft step against)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import click

from ..analysis import derivations as D


class InputError(ValueError):
    """An input the command cannot read: one line, exit 2."""


def _python_files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*.py") if not any(part.startswith(".") for part in q.parts)))
        elif p.exists():
            out.append(p)
        else:
            raise InputError(f"{raw}: no such file or folder")
    return out


def learned_from(paths: list[str], class_name: str | None) -> tuple[list[D.Derivation], set[str] | None]:
    """What the files show, and the fields of `class_name` where one of them defines it."""
    found: list[D.Derivation] = []
    fields: set[str] | None = None
    for path in _python_files(paths):
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text, str(path))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
            click.echo(f"invariant-check: {path}: skipped ({type(exc).__name__})", err=True)
            continue
        found.extend(D.learn_tree(tree, str(path)))
        if class_name:
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name == class_name:
                    fields = (fields or set()) | D.own_data_fields(node)
    return found, fields


def run(paths: list[str], class_name: str | None, fmt: str, extra: dict[str, list[str]] | None = None) -> list[D.Derivation]:
    learned, fields = learned_from(paths, class_name)
    # what IC004 counts: a derivation of the family (see `derivations.in_family`)
    learned = [d for d in learned if D.in_family(d)]
    table = D.Table(list(D.bundled()) + learned + D.configured(extra or {}))
    rows = table.all
    if class_name:
        if fields is None and paths:
            raise InputError(f"class {class_name!r} is not defined in {', '.join(paths)}")
        if fields is not None and not D.holds_layout(fields):
            click.echo(f"{class_name} holds no field of a batch's token layout (lengths, query offsets, positions, slots, "
                       "block tables): not a metadata class, nothing is derived", err=True)
            fields = set()
        if fields is None:
            # no files: the class as the releases' evidence names it, or any class holding both
            rows = [d for d in rows if d.owner in (class_name, None)]
        else:
            known = fields | {D.variant_of(f) for f in fields}
            rows = [d for d in rows if d.field in known and set(d.sources) & known]
    if fmt == "json":
        click.echo(json.dumps([d.to_json() for d in rows], indent=2))
        return rows
    if not rows:
        click.echo("no derived fields known" + (f" for {class_name}" if class_name else ""))
        return rows
    width = max(len(d.field) for d in rows)
    for d in sorted(rows, key=lambda d: (d.field, d.sources)):
        click.echo(f"{d.field:<{width}}  <- {', '.join(d.sources)}  [{d.kind}]")
        click.echo(f"{'':<{width}}     {d.how}; {d.where}")
    return rows
