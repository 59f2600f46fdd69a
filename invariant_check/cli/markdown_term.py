"""The Markdown of the rule pages, rendered for a terminal (what `invariant-check explain` shows).

    render(markdown, width=100, color=True) -> str

Only what rule documentation uses: `#`-headings, fenced code blocks, paragraphs, `-`/`*` and
numbered lists (nested by indentation), `>` quotes, tables (kept as written), and inline
`code`, **bold** and [links](target). Prose is wrapped to `width`; code is never wrapped or
re-indented beyond a four-space margin. Without colour, headings are underlined with `=`/`-`
and inline code keeps its backticks, so the text still reads as written. Standard library only.
"""

from __future__ import annotations

import re
import textwrap

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+(.*)$")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"(`+)(.+?)\1")

BOLD, UNDERLINE, DIM, CYAN, RESET = "\x1b[1m", "\x1b[4m", "\x1b[2m", "\x1b[36m", "\x1b[0m"


def _inline(text: str, color: bool) -> str:
    """Links become their text (and the address when it is a URL); code and bold are coloured,
    or left as written without colour."""

    def link(m: re.Match[str]) -> str:
        label, target = m.group(1), m.group(2)
        return f"{label} ({target})" if re.match(r"[a-z]+://", target) else label

    text = _LINK.sub(link, text)
    if not color:
        return text
    # protect code spans first: `**` inside code is not bold
    spans: list[str] = []

    def keep(m: re.Match[str]) -> str:
        spans.append(f"{CYAN}{m.group(2).strip() if m.group(1) != '`' else m.group(2)}{RESET}")
        return f"\x00{len(spans) - 1}\x00"

    text = _CODE.sub(keep, text)
    text = _BOLD.sub(lambda m: f"{BOLD}{m.group(1)}{RESET}", text)
    return re.sub(r"\x00(\d+)\x00", lambda m: spans[int(m.group(1))], text)


def _visible_len(text: str) -> int:
    return len(re.sub(r"\x1b\[[0-9;]*m", "", text))


def _units(text: str, color: bool, room: int) -> list[str]:
    """The styled pieces a line may break between: words, and code spans as one piece unless
    one is wider than `room` (then it breaks at its spaces, each part styled as code)."""
    words = text.split()
    units: list[str] = []
    buf: list[str] = []
    depth = 0
    for w in words:
        buf.append(w)
        depth ^= w.count("`") % 2
        if depth == 0:
            units.append(" ".join(buf))
            buf = []
    if buf:
        units.append(" ".join(buf))
    out: list[str] = []
    for unit in units:
        styled = _inline(unit, color)
        if _visible_len(styled) <= room or " " not in unit:
            out.append(styled)
            continue
        if not color or unit.count("`") != 2:
            out.extend(_inline(part, color) for part in unit.split(" "))
            continue
        lead, inner, tail = unit.split("`")
        parts = inner.split(" ")
        pieces = [f"{CYAN}{part}{RESET}" for part in parts]
        pieces[0], pieces[-1] = lead + pieces[0], pieces[-1] + tail
        out.extend(pieces)
    return out


def _wrap(text: str, width: int, first: str, rest: str, color: bool) -> list[str]:
    """Wraps source text (inline Markdown) as it will be seen: after the backticks and stars
    that colour replaces are gone."""
    units = _units(text, color, width - len(rest))
    if not units:
        return [first.rstrip()]
    lines: list[str] = []
    line, shown = first, _visible_len(first)
    empty = True
    for styled in units:
        size = _visible_len(styled)
        if not empty and shown + 1 + size > width:
            lines.append(line)
            line, shown, empty = rest, _visible_len(rest), True
        if empty:
            line += styled
            shown += size
            empty = False
        else:
            line += " " + styled
            shown += 1 + size
    lines.append(line)
    return lines


def _heading(level: int, text: str, color: bool) -> list[str]:
    shown = _inline(text, color)
    if color:
        style = BOLD + UNDERLINE if level == 1 else BOLD
        return [f"{style}{shown}{RESET}"]
    rule = "=" if level == 1 else "-"
    return [shown, rule * _visible_len(shown)] if level <= 2 else [shown]


def render(markdown: str, width: int = 100, color: bool = False) -> str:
    width = max(40, width)
    out: list[str] = []
    lines = markdown.splitlines()
    i = 0
    para: list[str] = []
    para_prefix: tuple[str, str] | None = None

    def flush() -> None:
        nonlocal para, para_prefix
        if para:
            first, rest = para_prefix or ("", "")
            out.extend(_wrap(" ".join(p.strip() for p in para), width, first, rest, color))
        para, para_prefix = [], None

    def blank() -> None:
        if out and out[-1] != "":
            out.append("")

    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            flush()
            blank()
            indent, marker = fence.group(1), fence.group(2)
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                code = lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip()
                out.append(f"    {DIM}{code}{RESET}" if color and code else f"    {code}".rstrip())
                i += 1
            i += 1  # the closing fence
            out.append("")
            continue
        if not line.strip():
            flush()
            blank()
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            blank()
            out.extend(_heading(len(heading.group(1)), heading.group(2), color))
            out.append("")
            i += 1
            continue
        if line.lstrip().startswith("|"):
            flush()
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                out.append(_inline(lines[i].rstrip(), color))
                i += 1
            continue
        bullet = _BULLET.match(line)
        if bullet:
            flush()
            indent = len(bullet.group(1).expandtabs())
            mark = "•" if bullet.group(2) in "-*+" and color else bullet.group(2)
            first = " " * indent + mark + " "
            para_prefix = (first, " " * len(first))
            para = [bullet.group(3)]
            i += 1
            continue
        if line.startswith(">"):
            flush()
            para_prefix = ("  │ " if color else "  > ", "  │ " if color else "  > ")
            while i < len(lines) and lines[i].startswith(">"):
                para.append(lines[i].lstrip(">").strip())
                i += 1
            flush()
            continue
        para.append(line)  # a paragraph, or the continuation of a list item
        i += 1
    flush()
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"
