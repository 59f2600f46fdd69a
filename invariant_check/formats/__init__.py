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


def report(result, options, *, to_terminal: bool, color: bool, sources=None, fixing=None) -> str:
    """The report of one `lint` run in the format its `LintOptions` name."""
    return render(
        options.fmt,
        result,
        result.rules,
        color=color,
        show_source=to_terminal if options.show_source is None else options.show_source,
        statistics=options.statistics,
        quiet=options.quiet,
        sources=sources or {},
        fixing=fixing,
        show_fixes=options.show_fixes,
    )
