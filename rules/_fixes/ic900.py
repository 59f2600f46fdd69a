"""IC900's fix: the unused suppression removed (safe: it suppresses nothing in this run).

The unused codes leave the comment and the rest stays (`ignore[IC002, IC001]` with IC001
unused becomes `ignore[IC002]`; `# noqa: E501, IC001` keeps `# noqa: E501` for the tool it
was written for); a directive left with no code goes, then the comment if nothing else is in
it, then the line if the comment was all of it.
"""

from __future__ import annotations

import io
import re
import tokenize

from invariant_check.api.registry import named_rule
from invariant_check.api.types import SAFE, Edit, Fix


def build(directive, idle: set[str] | None, text: str) -> Fix | None:
    """`idle`: the codes of the comment that suppress nothing (None: a bare `ignore`);
    `text`: the file's decoded text (`\\n` line endings)."""
    comment = _comment_at(text, directive.line, directive.column)
    if comment is None:
        return None
    col0, body = comment  # 0-based column of the `#`, the comment's text
    at = directive.column - 1 - col0  # where the directive starts in the comment
    if body[at : at + len(directive.text)] != directive.text:
        return None
    kept = None
    if idle is not None:
        kept = _kept(directive, idle)
    if kept:
        new_directive = kept
        new_body = body[:at] + new_directive + body[at + len(directive.text) :]
        what = "Remove the unused codes from the suppression"
    else:
        new_body = (body[:at] + body[at + len(directive.text) :]).strip()
        new_body = re.sub(r"^#\s*#", "#", new_body).strip()
        if new_body in ("", "#"):
            new_body = ""
        elif not new_body.startswith("#"):
            new_body = "# " + new_body
        what = "Remove the unused suppression"
    line = text.split("\n")[directive.line - 1]
    start, end = col0 + 1, col0 + len(body) + 1
    if new_body:
        return Fix(SAFE, what, (Edit(directive.line, start, directive.line, end, new_body),))
    code = line[:col0]
    if not code.strip():  # a comment line of its own: the line goes
        return Fix(SAFE, what, (Edit(directive.line, 1, directive.line + 1, 1, ""),))
    keep = len(code.rstrip())
    return Fix(SAFE, what, (Edit(directive.line, keep + 1, directive.line, end, ""),))


_NOQA = re.compile(r"#[ \t]*noqa\b[ \t]*[:=]?[ \t]*(?P<codes>[^#]*)", re.I)
_BRACKET = re.compile(r"\[(?P<codes>[^\]#]*)\]")


def _kept(directive, idle: set[str]) -> str | None:
    """The directive with the idle codes taken out, or None when no code of ours is left (a
    `# noqa` that keeps only other tools' codes is kept for them)."""
    text = directive.text
    m = _NOQA.match(text) if directive.kind == "noqa" else _BRACKET.search(text)
    if m is None:
        return None
    body = m.group("codes")
    tokens = [t for t in re.split(r"[,\s]+", body.strip()) if t]
    left = [t for t in tokens if (named_rule(t) or t) not in idle]
    if directive.kind == "noqa":
        if not left:
            return None
        kept = ", ".join(left)
        trail = body[len(body.rstrip()):]
        return text[: m.start("codes")] + kept + trail + text[m.end("codes") :]
    if not left:
        return None
    return text[: m.start("codes")] + ", ".join(left) + text[m.end("codes") :]


def _comment_at(text: str, line: int, column: int) -> tuple[int, str] | None:
    """(0-based column, text) of the comment token on `line` that holds `column` (1-based)."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT and tok.start[0] == line:
                if tok.start[1] <= column - 1 < tok.start[1] + len(tok.string):
                    return tok.start[1], tok.string
            if tok.start[0] > line:
                break
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return None
