"""`# invariant-check: ignore[IC001]` comments, read only in files that need them."""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

MARKER = b"invariant-check:"
COMMENT_RE = re.compile(
    # `ignore [IC001]` (a space before the bracket) names codes too; read as a bare `ignore`
    # it would silence every rule on the line.
    r"#\s*invariant-check:\s*(?P<kind>ignore|skip-file)\b(?:\s*\[(?P<codes>[^\]]*)\])?"
)


@dataclass
class Suppression:
    line: int
    column: int
    codes: frozenset[str] | None  # None: every rule
    used: bool = False

    def covers(self, code: str) -> bool:
        return self.codes is None or code in self.codes


@dataclass
class FileSuppressions:
    skip_file: bool
    by_line: dict[int, list[Suppression]]

    def match(self, code: str, lines: tuple[int, ...]) -> bool:
        hit = False
        for line in lines:
            for sup in self.by_line.get(line, ()):
                if sup.covers(code):
                    sup.used = True
                    hit = True
        return hit

    def all(self) -> list[Suppression]:
        return [s for sups in self.by_line.values() for s in sups]


def _comments(text: str):
    seen: set[int] = set()  # lines whose comment was yielded: the fallback must not repeat them
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                seen.add(tok.start[0])
                yield tok.start[0], tok.start[1], tok.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        # Tokenizing failed mid-file: fall back to plain lines for the rest, where a '#'
        # inside a string could be mistaken for a comment (harmless: it only suppresses).
        for lineno, line in enumerate(text.split("\n"), 1):  # CRs are already \n here
            idx = line.find("#")
            if idx >= 0 and lineno not in seen:
                yield lineno, idx, line[idx:]


def parse(source: bytes | str) -> FileSuppressions:
    if isinstance(source, bytes):
        if MARKER not in source:
            return FileSuppressions(False, {})
        text = source.decode("utf-8-sig", errors="replace")  # a BOM is not code
    else:
        if MARKER.decode() not in source:
            return FileSuppressions(False, {})
        text = source
    if "\r" in text:
        # Lines numbered as the parser numbers them: a lone CR (old Mac files) ends a line too.
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    skip = False
    by_line: dict[int, list[Suppression]] = {}
    for line, col, comment in _comments(text):
        m = COMMENT_RE.search(comment)
        if not m:
            continue
        if m.group("kind") == "skip-file":
            skip = True
            continue
        raw = m.group("codes")
        codes = (
            frozenset(c.strip().upper() for c in raw.split(",") if c.strip())
            if raw is not None
            else None
        )
        by_line.setdefault(line, []).append(Suppression(line, col + 1, codes))
    return FileSuppressions(skip, by_line)
