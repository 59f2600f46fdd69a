"""One statement too long for the project's line length, split the way `ruff format` (and black)
split it, for the lines a finding's hint shows.

    wrap("    x = f(a, b)", 88) -> ["    x = f(a, b)"]           fits: unchanged
    wrap(long_line, 88)        -> ["    x = f(", "        a,", "        b,", "    )"]

The split, as ruff's formatter does it for a line without comments: the last bracket pair of the
line holds the body ("right-hand split": the head up to the opening bracket, the body indented
one level, the closing bracket and what follows it); a body that does not fit on one line is
split at its delimiters of the lowest binding, one part a line: commas (each element then ends
with a comma, the last one too), else `if`/`else` of a conditional expression, `and`/`or`,
comparisons, `+`/`-`, `*`/`/`. Each line still too long is split the same way. A line this does
not understand (a comment, a string spanning lines, no bracket) is returned as it is.

`line_length(path)`: the line length of the project a file belongs to, as ruff reads it: the
nearest `ruff.toml`, `.ruff.toml` or `pyproject.toml` with a `[tool.ruff]` table above the
file, its `line-length`; 88 without one.
"""

from __future__ import annotations

import io
import os
import tokenize
from functools import lru_cache

DEFAULT_LINE_LENGTH = 88
INDENT = "    "
_OPEN, _CLOSE = "([{", ")]}"
_COMPARISONS = {"<", ">", "==", "!=", "<=", ">=", "in", "not", "is"}
# lower: binds less, split first (black's priorities: comma, ternary, logic, comparison, math)
_PRIORITY = [
    ({","}, "comma"),
    ({"if", "else"}, "ternary"),
    ({"and", "or"}, "logic"),
    (_COMPARISONS, "comparison"),
    ({"+", "-"}, "sum"),
    ({"*", "/", "//", "%", "@"}, "product"),
]


def wrap(line: str, limit: int = DEFAULT_LINE_LENGTH) -> list[str]:
    if len(line) <= limit:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    tokens = _tokens(line.strip())
    if tokens is None:
        return [line]
    out = _split(indent, tokens, limit)
    return out if out is not None else [line]


def wrap_statements(lines: list[str], limit: int = DEFAULT_LINE_LENGTH) -> list[list[str]]:
    """Each of `lines` (consecutive lines of a file, starting at a statement) as it is shown:
    `wrap` of a line that holds one whole statement, the line itself otherwise (a line of a
    string or of a statement spanning lines is never split)."""
    out = [[line] for line in lines]
    long = [i for i, line in enumerate(lines) if len(line) > limit]
    if not long:
        return out
    whole = _single_line_statements(lines)
    for i in long:
        if i in whole:
            out[i] = wrap(lines[i], limit)
    return out


def _single_line_statements(lines: list[str]) -> set[int]:
    """The (0-based) lines that hold one logical line from its start to its end."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return set()
    whole: set[int] = set()
    start_row = None
    for tok in toks:
        if tok.type == tokenize.ERRORTOKEN:
            return set()
        if tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        if tok.type == tokenize.NEWLINE:
            if start_row is not None and tok.start[0] == start_row:
                whole.add(start_row - 1)
            start_row = None
            continue
        if start_row is None:
            start_row = tok.start[0]
        if tok.end[0] != start_row:
            start_row = -1  # this logical line spans lines
    return whole


def _tokens(text: str) -> list[tuple[str, str, int]] | None:
    """(string, kind, spaces before it) of one logical line; None: comments, several lines."""
    try:
        raw = list(tokenize.generate_tokens(io.StringIO(text + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    out: list[tuple[str, str, int]] = []
    end = (1, 0)
    for tok in raw:
        if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.NL):
            continue
        if tok.type in (tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ERRORTOKEN) or tok.start[0] != 1 or tok.end[0] != 1:
            return None
        kind = "op" if tok.type == tokenize.OP else ("name" if tok.type == tokenize.NAME else "other")
        out.append((tok.string, kind, tok.start[1] - end[1]))
        end = tok.end
    return out or None


def _text(tokens) -> str:
    parts = []
    for i, (s, _, gap) in enumerate(tokens):
        parts.append((" " if gap and i else "") + s)
    return "".join(parts)


def _depths(tokens) -> list[int]:
    """The bracket depth each token stands at (an opening bracket at its outer depth)."""
    out, depth = [], 0
    for s, kind, _ in tokens:
        if kind == "op" and s in _CLOSE:
            depth -= 1
        out.append(depth)
        if kind == "op" and s in _OPEN:
            depth += 1
    return out


def _split(indent: str, tokens, limit: int) -> list[str] | None:
    text = indent + _text(tokens)
    if len(text) <= limit:
        return [text]
    depths = _depths(tokens)
    # the last closing bracket at depth 0, and its opening bracket
    close = next((i for i in range(len(tokens) - 1, -1, -1) if tokens[i][1] == "op" and tokens[i][0] in _CLOSE and depths[i] == 0), None)
    if close is None:
        return None
    opening = next((i for i in range(close - 1, -1, -1) if depths[i] == 0 and tokens[i][1] == "op" and tokens[i][0] in _OPEN), None)
    if opening is None:
        return None
    head, body, tail = tokens[: opening + 1], tokens[opening + 1 : close], tokens[close:]
    if not body:
        return None
    inner = indent + INDENT
    lines = [indent + _text(head)]
    body = [(s, k, 0 if i == 0 else g) for i, (s, k, g) in enumerate(body)]
    magic = body[-1][0] == ","  # a trailing comma keeps one element a line (ruff's magic comma)
    if not magic and len(inner + _text(body)) <= limit:
        lines.append(inner + _text(body))
    else:
        parts = _delimited(body)
        if parts is None:
            return None
        for part in parts:
            got = _split(inner, part, limit)
            if got is None:
                got = [inner + _text(part)]
            lines.extend(got)
    lines.append(indent + _text([(s, k, 0 if i == 0 else g) for i, (s, k, g) in enumerate(tail)]))
    return lines


def _delimited(body) -> list[list] | None:
    """The body split at its delimiters of the lowest binding (depth 0 of the body); a comma
    split gives every element its comma, the last one too."""
    depths = _depths(body)
    top = [(i, s) for i, ((s, kind, _), d) in enumerate(zip(body, depths)) if d == 0 and kind in ("op", "name")]
    if any(s in ("for", "lambda", ":=") for _, s in top) or any(s == ":" for _, s in top):
        return None  # comprehensions, lambdas, slices: not split here
    for words, name in _PRIORITY:
        at = [i for i, s in top if s in words]
        if name == "comparison":
            # `not in`, `is not`: one operator, split before its first word
            at = [i for i in at if not (body[i][0] == "not" and i and body[i - 1][0] in ("is", "not"))
                  and not (body[i][0] == "not" and (i + 1 >= len(body) or body[i + 1][0] != "in"))
                  and not (body[i][0] == "in" and i and body[i - 1][0] == "not")]
        if name in ("sum", "product"):
            # a unary minus (after an operator or at the start) is no delimiter
            at = [i for i in at if i and not (body[i - 1][1] == "op" and body[i - 1][0] not in _CLOSE)]
        if not at:
            continue
        parts: list[list] = []
        if name == "comma":
            start = 0
            for i in at:
                parts.append(body[start : i + 1])
                start = i + 1
            if start < len(body):
                parts.append(body[start:] + [(",", "op", 0)])
        else:
            start = 0
            for i in at:
                if i > start:
                    parts.append(body[start:i])
                start = i
            parts.append(body[start:])
        return [[(s, k, 0 if j == 0 else g) for j, (s, k, g) in enumerate(p)] for p in parts if p]
    return None


@lru_cache(maxsize=256)
def line_length(folder: str) -> int:
    """The line length ruff uses for files in `folder` (absolute)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    current = folder
    while True:
        for name in ("ruff.toml", ".ruff.toml", "pyproject.toml"):
            candidate = os.path.join(current, name)
            if not os.path.isfile(candidate):
                continue
            try:
                with open(candidate, "rb") as fh:
                    data = tomllib.load(fh)
            except (OSError, ValueError):
                continue
            tool = data.get("tool")
            table = (tool.get("ruff") if isinstance(tool, dict) else None) if name == "pyproject.toml" else data
            if not isinstance(table, dict):
                continue  # a pyproject.toml without [tool.ruff]: ruff looks further up
            value = table.get("line-length")
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else DEFAULT_LINE_LENGTH
        parent = os.path.dirname(current)
        if parent == current:
            return DEFAULT_LINE_LENGTH
        current = parent


def line_length_of(path: str) -> int:
    return line_length(os.path.dirname(os.path.abspath(path)))
