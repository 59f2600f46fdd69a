"""`path:line:col: IC001 message`, a caret under the source on terminals, a hint, a summary."""

from __future__ import annotations

import re
from collections import Counter

_LINE_END = re.compile(r"\r\n|\r|\n")


def _source_line(path: str, line: int, cache: dict, sources: dict) -> str | None:
    if path not in cache:
        try:
            if path in sources:  # standard input: the buffer, not the file on disk
                data = sources[path]
            else:
                with open(path, "rb") as fh:
                    data = fh.read()
            # Python ends lines at \n, \r\n and \r only; str.splitlines would also split
            # at form feeds and U+2028 and show the wrong line.
            cache[path] = _LINE_END.split(data.decode("utf-8-sig", errors="replace"))
        except OSError:
            cache[path] = []
    lines = cache[path]
    return lines[line - 1] if 0 < line <= len(lines) else None


def render(
    result,
    rules,
    *,
    color: bool = False,
    show_source: bool = False,
    statistics: bool = False,
    quiet: bool = False,
    sources: dict | None = None,
    fixing=None,
    show_fixes: bool = False,
    **_,
) -> str:
    """`quiet`: the findings only. `sources`: shown path -> bytes linted instead of the file.
    `fixing`: what `--fix` did (a `fixes.FixOutcome`); `show_fixes` lists it."""
    bold = (lambda s: f"\x1b[1m{s}\x1b[0m") if color else (lambda s: s)
    red = (lambda s: f"\x1b[31m{s}\x1b[0m") if color else (lambda s: s)
    cyan = (lambda s: f"\x1b[36m{s}\x1b[0m") if color else (lambda s: s)
    out: list[str] = []
    lines_of: dict = {}
    for f in result.findings:
        out.append(f"{bold(f'{f.path}:{f.line}:{f.column}:')} {red(f.rule)} {f.message}")
        if show_source:
            src = _source_line(f.path, f.line, lines_of, sources or {})
            if src is not None:
                end = f.end_column - 1 if f.end_line == f.line else len(src)
                # Tabs are expanded so that the caret lines up with what the terminal shows.
                start_at = len(src[: f.column - 1].expandtabs())
                width = len(src[:end].expandtabs()) - start_at
                out.append(f"    {src.expandtabs()}")
                out.append("    " + " " * start_at + red("^" * max(1, width)))
        if f.hint:
            first, *rest = f.hint.split("\n")  # a fix's hint: its lines follow, indented
            out.append(f"    {cyan('hint:')} {first}")
            out.extend(f"        {line}".rstrip() for line in rest)
    if statistics and result.findings:
        counts = Counter((f.rule, f.name) for f in result.findings)
        for (code, name), n in sorted(counts.items()):
            out.append(f"{n:5d}  {code}  {name}")
    fixed = list(fixing.applied) if fixing is not None else []
    if show_fixes and fixed:
        out.append(f"Fixed {len(fixed)} finding{'s' * (len(fixed) != 1)}:")
        for f in sorted(fixed, key=lambda f: f.sort_key()):
            out.append(f"    {f.path}:{f.line}:{f.column}: {f.rule} {f.fix.message}")
    if quiet:
        return "".join(line + "\n" for line in out)
    n = len(result.findings)
    missing = getattr(result, "paths_not_found", 0)
    e = len(result.errors) - missing
    files = len({f.path for f in result.findings})
    parts = []
    if n:
        parts.append(f"Found {n} finding{'s' * (n != 1)} in {files} file{'s' * (files != 1)}")
    if e:
        parts.append(f"{e} file{'s' * (e != 1)} could not be linted")
    if missing:
        parts.append(f"{missing} path{'s' * (missing != 1)} not found")
    checked = f"{result.files_seen} file{'s' * (result.files_seen != 1)} checked"
    held = getattr(result, "baselined", None)
    if held:
        checked += f"; {held} more in the baseline"
    safe = sum(1 for f in result.findings if f.fix is not None and f.fix.applicability == "safe")
    unsafe = sum(1 for f in result.findings if f.fix is not None and f.fix.applicability != "safe")
    if safe or unsafe:
        offers = []
        if safe:
            offers.append(f"{safe} fixable with `--fix`")
        if unsafe:
            offers.append(f"{unsafe} {'more ' if safe else 'fixable '}with `--fix --unsafe-fixes` (review them first: `--diff --unsafe-fixes`)")
        out.append("; ".join(offers) + ".")
    if fixed:
        parts = [p[:1].lower() + p[1:] for p in parts] or ["none left"]
        parts.insert(0, f"Fixed {len(fixed)} finding{'s' * (len(fixed) != 1)}")
    if not parts and not result.files_seen:
        out.append("No Python file found (0 files checked).")
    elif not parts:
        out.append(f"All checks passed ({checked}).")
    else:
        out.append("; ".join(parts) + f" ({checked}).")

    codes = sorted({f.rule for f in result.findings})
    if len(codes) == 1:
        out.append(f"Run `invariant-check explain {codes[0]}` for the rule's documentation and fix.")
    elif codes:
        out.append(f"Run `invariant-check explain CODE` ({', '.join(codes)}) for a rule's documentation and fix.")
    return "\n".join(out) + "\n"


def render_errors(result) -> str:
    """One line per file that could not be linted (written to stderr by the CLI)."""
    lines = []
    for e in result.errors:
        where = f"{e.path}:{e.line}:{e.column}" if e.line else e.path
        lines.append(f"{where}: error: {e.message}")
    return "".join(l + "\n" for l in lines)
