"""Suppression comments, read only in files that may hold one.

    x  # invariant-check: ignore[IC002, skip-topk-without-compaction]   codes or names
    x  # invariant-check: ignore                                          every rule
    x  # noqa: IC002, E501                                                the IC codes only
    # invariant-check: skip-file                                          anywhere in the file

A bare `# noqa` (no codes) is left to the tools it was written for: it does not silence an
invariant finding. Anything after `invariant-check:` that is not one of the directives above,
and any code or name that names no rule, is kept as a problem (reported as IC901).
"""

from __future__ import annotations

import difflib
import io
import re
import tokenize
from dataclasses import dataclass, field

MARKER = b"invariant-check:"
# Bumped when the comment syntax changes: the cache remembers which files hold a marker.
SYNTAX_VERSION = 2

DIRECTIVE_RE = re.compile(
    r"#[ \t]*invariant-check:[ \t]*(?P<kind>[A-Za-z][\w-]*)?"
    r"(?:[ \t]*\[(?P<codes>[^\]#]*)(?P<close>\])?)?"
)
# flake8/ruff spelling: `# noqa: A123, B4` or `# noqa:A123 B4`; `noqa` in any case
NOQA_RE = re.compile(
    r"#[ \t]*(?i:noqa)[ \t]*:[ \t]*(?P<codes>[A-Za-z]+[0-9]+(?:(?:[ \t]*,[ \t]*|[ \t]+)[A-Za-z]+[0-9]+)*)"
)
_OUR_CODE = re.compile(r"(?i:IC)[0-9]+")
_NOQA_BYTES = re.compile(rb"(?i:noqa)[ \t]*:[^\n\r]*?(?i:IC)[0-9]")
_NOQA_TAIL = re.compile(rb"[ \t]*:[^\n\r]*?ic[0-9]")


def has_marker(data: bytes, lower: bytes | None = None) -> bool:
    """Whether the bytes may hold a suppression comment (cheap; no tokenizing)."""
    if MARKER in data:
        return True
    lower = data.lower() if lower is None else lower
    if b"noqa" not in lower:
        return False
    # each `noqa`, then the rest of its line: does it name one of our codes?
    pos = lower.find(b"noqa")
    while pos >= 0:
        if _NOQA_TAIL.match(lower, pos + 4):
            return True
        pos = lower.find(b"noqa", pos + 4)
    return False


@dataclass
class Directive:
    """One suppression comment."""

    line: int
    column: int  # 1-based, at the `#`
    text: str  # as written: `# invariant-check: ignore[IC002, IC001]`
    kind: str  # "ignore", "noqa", "skip-file" or "invalid"
    # (token as written, rule code) for each rule named; None: every rule (a bare `ignore`)
    named: tuple[tuple[str, str], ...] | None = ()
    problems: list[str] = field(default_factory=list)  # why (part of) it is invalid
    used: bool = False  # a bare `ignore` suppressed something
    used_codes: set[str] = field(default_factory=set)

    @property
    def codes(self) -> frozenset[str] | None:
        return None if self.named is None else frozenset(code for _, code in self.named)

    def covers(self, code: str) -> bool:
        return self.kind in ("ignore", "noqa") and (self.named is None or any(c == code for _, c in self.named))

    def names_explicitly(self, code: str) -> bool:
        return self.named is not None and any(c == code for _, c in self.named)


@dataclass
class FileSuppressions:
    skip_file: bool
    by_line: dict[int, list[Directive]]

    def match(self, code: str, lines: tuple[int, ...]) -> bool:
        """Whether a comment on any of `lines` covers `code`; marks the comments used."""
        hit = False
        for line in dict.fromkeys(lines):
            for d in self.by_line.get(line, ()):
                if d.covers(code):
                    if d.named is None:
                        d.used = True
                    else:
                        d.used_codes.add(code)
                    hit = True
        return hit

    def all(self) -> list[Directive]:
        return [d for ds in self.by_line.values() for d in ds]


# -- resolving codes and names ------------------------------------------------------------------


def _rule_index() -> tuple[dict[str, str], dict[str, str]]:
    from .registry import all_rules

    rules = all_rules()
    return {c.upper(): c for c in rules}, {r.NAME.lower(): c for c, r in rules.items() if r.NAME}


def resolve(token: str) -> str | None:
    """The rule a comment names: an exact code or name, in any case. Prefixes name nothing
    here (unlike --select): a suppression should say exactly what it silences."""
    by_code, by_name = _rule_index()
    return by_code.get(token.upper()) or by_name.get(token.lower())


def suggestion(token: str) -> str | None:
    by_code, by_name = _rule_index()
    for pool, key in ((by_code, token.upper()), (by_name, token.lower())):
        close = difflib.get_close_matches(key, list(pool), n=1, cutoff=0.6)
        if close:
            return close[0] if pool is by_name else pool[close[0]]
    return None


# -- reading comments -------------------------------------------------------------------------


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


def _directive(line: int, column: int, m: re.Match[str]) -> Directive:
    text = m.group(0).rstrip()
    kind, codes = m.group("kind"), m.group("codes")
    if kind not in ("ignore", "skip-file"):
        what = f"unknown directive `{kind}`" if kind else "no directive"
        return Directive(line, column, text, "invalid", problems=[f"{what} (expected `ignore[CODES]`, `ignore` or `skip-file`)"])
    if codes is not None and m.group("close") is None:
        return Directive(line, column, text, "invalid", problems=["the `[` is not closed"])
    if kind == "skip-file":
        if codes is not None:
            return Directive(line, column, text, "invalid", problems=["`skip-file` takes no codes (it skips every rule)"])
        return Directive(line, column, text, "skip-file")
    if codes is None:
        return Directive(line, column, text, "ignore", named=None)
    tokens = [t for t in re.split(r"[,\s]+", codes) if t]
    if not tokens:
        return Directive(line, column, text, "invalid", problems=["`ignore[]` names no rule"])
    return _named(line, column, text, "ignore", tokens)


def _named(line: int, column: int, text: str, kind: str, tokens: list[str]) -> Directive:
    named, problems = [], []
    for token in tokens:
        code = resolve(token)
        if code is None:
            guess = suggestion(token)
            problems.append(f"unknown rule `{token}`" + (f" (did you mean {guess}?)" if guess else ""))
        else:
            named.append((token, code))
    return Directive(line, column, text, kind, tuple(named), problems)


def _noqa(line: int, column: int, m: re.Match[str]) -> Directive | None:
    ours = [t for t in re.split(r"[,\s]+", m.group("codes")) if _OUR_CODE.fullmatch(t)]
    if not ours:
        return None  # written for other tools only
    return _named(line, column, m.group(0).rstrip(), "noqa", ours)


def parse(source: bytes | str) -> FileSuppressions:
    if isinstance(source, bytes):
        if not has_marker(source):
            return FileSuppressions(False, {})
        text = source.decode("utf-8-sig", errors="replace")  # a BOM is not code
    else:
        if not has_marker(source.encode("utf-8", "surrogatepass")):
            return FileSuppressions(False, {})
        text = source
    if "\r" in text:
        # Lines numbered as the parser numbers them: a lone CR (old Mac files) ends a line too.
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    skip = False
    by_line: dict[int, list[Directive]] = {}
    for line, col, comment in _comments(text):
        found: list[tuple[int, Directive]] = []
        if "invariant-check:" in comment:
            for m in DIRECTIVE_RE.finditer(comment):
                found.append((m.start(), _directive(line, col + m.start() + 1, m)))
        if "noqa" in comment.lower():
            for m in NOQA_RE.finditer(comment):
                d = _noqa(line, col + m.start() + 1, m)
                if d is not None:
                    found.append((m.start(), d))
        for _, d in sorted(found, key=lambda item: item[0]):
            if d.kind == "skip-file":
                skip = True
            by_line.setdefault(line, []).append(d)
    return FileSuppressions(skip, by_line)
