"""GitHub Actions workflow commands: one `::error ...::message` line per finding."""

from __future__ import annotations


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render(result, rules, **_) -> str:
    lines = []
    for f in result.findings:
        msg = f.message + (f" (hint: {f.hint})" if f.hint else "")
        lines.append(
            f"::error file={_escape_prop(f.path)},line={f.line},col={f.column},"
            f"endLine={f.end_line},endColumn={f.end_column},"
            f"title={_escape_prop(f.rule)}::{_escape_data(msg)}"
        )
    for e in result.errors:
        loc = f",line={e.line},col={e.column}" if e.line else ""
        lines.append(
            f"::error file={_escape_prop(e.path)}{loc},title=invariant-check::{_escape_data(e.message)}"
        )
    return "".join(l + "\n" for l in lines)
