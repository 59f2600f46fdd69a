"""Output formats. Each module exposes `render(result, rules, *, color, show_source) -> str`."""

from __future__ import annotations

FORMATS = ("text", "json", "sarif", "github")


def render(fmt: str, result, rules, **kwargs) -> str:
    if fmt == "text":
        from .text import render as r
    elif fmt == "json":
        from .json import render as r
    elif fmt == "sarif":
        from .sarif import render as r
    elif fmt == "github":
        from .github import render as r
    else:  # click validates the choice; this guards library callers
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return r(result, rules, **kwargs)
