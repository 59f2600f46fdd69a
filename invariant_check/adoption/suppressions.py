"""Suppression comments: one grammar, read only in files that may hold one.

    x  # invariant-check: ignore[IC002, skip-topk-without-compaction]   codes or names
    x  # invariant-check: ignore                                          every rule (blanket)
    x  # noqa: IC002, E501                                                the IC codes only
    # invariant-check: skip-file                                          anywhere in the file

Spelling, exactly: `#`, optional spaces, `invariant-check:`, optional spaces, then `ignore[...]`
(no space before `[`; codes in upper case, names in lower case, separated by commas), a bare
`ignore` (followed by nothing, a `--` reason or another `#` comment), or `skip-file`. After
`]` any text (a reason) may follow. In `# noqa: ...` comments (flake8/ruff) only codes that start
with `IC` are ours; a bare `# noqa` or `# noqa: E501` is left to the tools it was written for.

A comment shaped like a suppression but spelt otherwise (`# invariant-check: ignore IC002`,
`# noqa IC002`, `# invariant-check ignore[IC002]`, `# invariant_check: ignore[IC002]`,
`ignore [IC002]`, `ignore[ic002]`, `ignore[IC001; IC002]`, `# type: ignore[IC002]`...) suppresses
nothing and is kept as a problem (reported as IC901) with the correct spelling. So does a code
or name that names no rule; the other rules of the same comment still count. No form suppresses
more than it names: only the bare `ignore`, written as such, covers every rule.
"""

from __future__ import annotations

import difflib
import io
import re
import tokenize
from dataclasses import dataclass, field

from ..api.registry import _rule_index
from ..api.registry import canonical_token as canonical
from ..api.registry import named_rule as resolve
from ..api.registry import suggested_code as suggestion

MARKER = b"invariant-check:"
# Bumped when the comment syntax changes: the cache remembers which files hold a marker.
SYNTAX_VERSION = 3

# The accepted spelling of the directive's head, and anything that looks like an attempt at it:
# the marker in any case, with `_`, spaces or nothing for the hyphen, with or without the colon.
_HEAD_LOOSE = re.compile(
    r"#[ \t]*(?P<marker>invariant[ \t_-]*check)(?P<sep>[ \t]*[:=]?[ \t]*)"
    r"(?P<kind>[A-Za-z][\w-]*)?(?P<rest>.*)",
    re.I,
)
_HEAD_SEP_OK = re.compile(r":[ \t]*")
# flake8/ruff spelling: `# noqa: A123, B4` or `# noqa:A123 B4`; `noqa` in any case
_NOQA_LOOSE = re.compile(r"#[ \t]*(?P<noqa>noqa)\b(?P<sep>[ \t]*[:=(\[]?[ \t]*)(?P<rest>.*)", re.I)
_NOQA_CODES = re.compile(r"[A-Za-z]+[0-9]+(?:(?:[ \t]*,[ \t]*|[ \t]+)[A-Za-z]+[0-9]+)*")
# Other tools' suppression syntax, which invariant-check does not read: flagged when it names one
# of our codes (the author meant to silence us).
_OTHER_TOOL = re.compile(
    r"#[ \t]*(?P<tool>type|pylint|pyright|mypy|ruff|flake8|nolint)[ \t]*:[ \t]*(?P<body>[^#]*)", re.I
)
_TOOLS = {"type": "a type checker's", "pylint": "pylint's", "pyright": "pyright's", "mypy": "mypy's",
          "ruff": "ruff's", "flake8": "flake8's", "nolint": "a linter's"}
_OUR_CODE = re.compile(r"(?i:IC)[0-9]+")
_OUR_CODE_WORD = re.compile(r"(?<![A-Za-z0-9_])(?i:IC)[0-9]{3}(?![0-9A-Za-z_])")
_CODE_SHAPE = re.compile(r"[A-Za-z]{1,4}[0-9]{1,4}")
_BLANKET_TOKENS = ("*", "all")
_KIND_ALIASES = {
    "ignore": "ignore",
    "disable": "ignore",
    "noqa": "ignore",
    "suppress": "ignore",
    "skip-file": "skip-file",
    "skipfile": "skip-file",
    "ignore-file": "skip-file",
}

# -- the cheap test: may these bytes hold a suppression comment? ----------------------------------
_NEAR_MARKER_BYTES = re.compile(rb"#[ \t]*invariant[ \t_-]*check")
_OUR_CODE_BYTES = re.compile(rb"ic[0-9]")
_SUPPRESSION_WORDS_BYTES = re.compile(rb"noqa|ignore|disable|suppress")


def has_marker(data: bytes, lower: bytes | None = None) -> bool:
    """Whether the bytes may hold a suppression comment, or something shaped like one (cheap;
    no tokenizing): our marker or a near spelling of it, or one of our codes on a line with a
    `#` and a suppression word (`noqa`, `ignore`, `disable`, `suppress`) between them. Two scans
    of the bytes (a third of the time a cold run spends reading a file), as before near misses
    were read."""
    lower = data.lower() if lower is None else lower
    if b"invariant" in lower and (MARKER in data or _NEAR_MARKER_BYTES.search(lower)):
        return True
    for m in _OUR_CODE_BYTES.finditer(lower):
        start = max(lower.rfind(b"\n", 0, m.start()), lower.rfind(b"\r", 0, m.start())) + 1
        hash_at = lower.find(b"#", start, m.start())
        if hash_at >= 0 and _SUPPRESSION_WORDS_BYTES.search(lower, hash_at, m.start()):
            return True
    return False


@dataclass
class Directive:
    """One suppression comment (or a malformed attempt at one)."""

    line: int
    column: int  # 1-based, at the `#`
    text: str  # as written: `# invariant-check: ignore[IC002, IC001]`
    kind: str  # "ignore", "noqa", "skip-file" or "invalid"
    # (token as written, rule code) for each rule named; None: every rule (a bare `ignore`)
    named: tuple[tuple[str, str], ...] | None = ()
    problems: list[str] = field(default_factory=list)  # why (part of) it is invalid
    used: bool = False  # a bare `ignore` suppressed something
    used_codes: set[str] = field(default_factory=set)
    spelling: str | None = None  # the correct spelling, when it can be told

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
# The registry resolves a code or a name to a rule (the rules' fix builders ask it too): the
# grammar uses it as `resolve`, `canonical` and `suggestion` (imported above).


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


@dataclass
class _Tokens:
    """The rules a list of tokens names, the problems of the others, and the list as it should
    be spelt (None when a token cannot be told)."""

    named: list[tuple[str, str]]
    problems: list[str]
    spelt: list[str] | None
    blanket: bool = False  # `*` or `all`: the bare `ignore` was meant


def _read_tokens(tokens: list[str]) -> _Tokens:
    named: list[tuple[str, str]] = []
    problems: list[str] = []
    spelt: list[str] | None = []
    blanket = False
    for token in tokens:
        right = canonical(token)
        if right is not None and right == token:
            named.append((token, resolve(token) or token))
            spelt is not None and spelt.append(token)
            continue
        if right is not None:
            what = "codes are upper case" if resolve(token) and token.upper() in _rule_index()[0] else "names are lower case"
            problems.append(f"`{token}` is spelt `{right}` ({what})")
            spelt is not None and spelt.append(right)
        elif token.lower() in _BLANKET_TOKENS:
            problems.append(f"`{token}` names no rule (the blanket form is a bare `ignore`, without brackets)")
            blanket = True
            spelt = None
        else:
            guess = suggestion(token)
            problems.append(f"unknown rule `{token}`" + (f" (did you mean {guess}?)" if guess else ""))
            if spelt is not None:
                spelt = spelt + [guess] if guess else None
    return _Tokens(named, problems, spelt, blanket)


def _ignore_spelling(spelt: list[str] | None, blanket: bool = False) -> str | None:
    if blanket:
        return "# invariant-check: ignore"
    if not spelt:
        return None
    return f"# invariant-check: ignore[{', '.join(dict.fromkeys(spelt))}]"


def _split_list(body: str) -> tuple[list[str], bool]:
    """Tokens of a bracketed list, and whether they were separated by commas only."""
    parts = [p.strip() for p in body.split(",")]
    tokens = [t for t in re.split(r"[,;|\s]+", body) if t]
    clean = all(p and not re.search(r"[\s;|]", p) for p in parts) if tokens else True
    return tokens, clean


def _bracketed(rest: str, open_at: int) -> tuple[str | None, int]:
    """The text between the bracket at `open_at` and its closing one, and the index after it;
    (None, len) when it is not closed: the comment then runs to its end."""
    closer = {"[": "]", "(": ")", "{": "}"}[rest[open_at]]
    close = rest.find(closer, open_at + 1)
    if close < 0:
        return None, len(rest)
    return rest[open_at + 1 : close], close + 1


def _head(line: int, column: int, m: re.Match[str]) -> Directive | None:
    """`# invariant-check: ...` and the near spellings of it."""
    marker, sep, kind, rest = m.group("marker"), m.group("sep"), m.group("kind"), m.group("rest")
    start = m.start()
    problems: list[str] = []
    if marker != "invariant-check":
        problems.append(f"the marker is spelt `invariant-check`, not `{marker}`")
    if not _HEAD_SEP_OK.fullmatch(sep):
        problems.append("`invariant-check` is followed by a colon" + (" (no space before it)" if ":" in sep else ""))
    head_end = m.start("rest")
    exact_head = not problems
    if kind is None and not exact_head:
        return None  # `# invariant check` in prose: not an attempt at a directive
    if kind is None:
        text = m.group(0)[: head_end - start].rstrip() or m.group(0).rstrip()
        return Directive(line, column, text, "invalid",
                         problems=problems + ["no directive (expected `ignore[CODES]`, a bare `ignore` or `skip-file`)"],
                         spelling="# invariant-check: ignore[CODE]")
    norm = re.sub(r"[ \t_]+", "-", kind.lower())
    right_kind = _KIND_ALIASES.get(norm)
    if right_kind is None:
        close = difflib.get_close_matches(norm, ["ignore", "skip-file"], n=1, cutoff=0.6)
        right_kind = close[0] if close else None
        if right_kind is None and not exact_head:
            return None  # `# Invariant check: the rows...` in prose
        text = m.group(0)[: head_end - start]
        full = m.group(0).rstrip()
        return Directive(line, column, _quote(full, text, rest), "invalid",
                         problems=problems + [f"unknown directive `{kind}`"
                                              + (f": did you mean `{right_kind}`?" if right_kind else
                                                 " (expected `ignore[CODES]`, a bare `ignore` or `skip-file`)")],
                         spelling=_respell(right_kind, rest) if right_kind else None)
    if kind != right_kind:
        problems.append(f"the directive is spelt `{right_kind}`, not `{kind}`")
    head_text = m.group(0)[: head_end - start]
    if right_kind == "skip-file":
        text = head_text.rstrip()
        if rest.lstrip()[:1] in ("[", "("):
            open_at = len(rest) - len(rest.lstrip())
            _, after = _bracketed(rest, open_at)
            text = (head_text + rest[:after]).rstrip()
            problems.append("`skip-file` takes no codes (it skips every rule; `per-file-ignores` ignores some)")
        return Directive(line, column, text, "invalid" if problems else "skip-file", problems=problems,
                         spelling="# invariant-check: skip-file" if problems else None)
    return _ignore(line, column, head_text, rest, problems)


def _respell(kind: str, rest: str) -> str | None:
    if kind == "skip-file":
        return "# invariant-check: skip-file"
    body = rest.strip()
    if body.startswith("[") and "]" in body:
        tokens, _ = _split_list(body[1 : body.index("]")])
        return _ignore_spelling(_read_tokens(tokens).spelt)
    return "# invariant-check: ignore[CODE]"


def _quote(full: str, head: str, rest: str) -> str:
    """The part of the comment a finding quotes: the head, and a bracket right after it."""
    stripped = rest.lstrip()
    if stripped.startswith("["):
        close = stripped.find("]")
        if close >= 0:
            return head + rest[: len(rest) - len(stripped) + close + 1]
        return full
    return head.rstrip()


def _ignore(line: int, column: int, head: str, rest: str, problems: list[str]) -> Directive:
    """What follows `ignore`: `[CODES]`, nothing (blanket), or a near miss."""
    stripped = rest.lstrip()
    gap = rest[: len(rest) - len(stripped)]
    if stripped[:1] in ("[", "(", "{") or re.match(r"[:=][ \t]*\S", stripped):
        # a list, in brackets or after a separator
        if stripped[:1] in ("[", "(", "{"):
            body, after = _bracketed(rest, len(gap))
            text = (head + rest[:after]).rstrip()
            if body is None:
                return Directive(line, column, text, "invalid",
                                 problems=problems + [f"the `{stripped[0]}` is not closed"],
                                 spelling=_ignore_spelling(_read_tokens(_split_list(stripped[1:])[0]).spelt))
            if stripped[0] != "[":
                problems.append(f"codes go in square brackets, not `{stripped[0]}`")
            if gap:
                problems.append("no space between `ignore` and `[`")
        else:
            m = re.match(r"[:=][ \t]*([\w-]+(?:[ \t]*,[ \t]*[\w-]+)*)", stripped)
            body = m.group(1) if m else ""
            text = (head + gap + (m.group(0) if m else stripped)).rstrip()
            problems.append(f"codes go in square brackets right after `ignore`, not after `{stripped[0]}`")
        tokens, commas = _split_list(body)
        if not tokens:
            return Directive(line, column, text, "invalid", problems=problems + ["`ignore[]` names no rule"],
                             spelling="# invariant-check: ignore[CODE]")
        read = _read_tokens(tokens)
        if not commas:
            problems.append("codes are separated by commas")
        spelling = _ignore_spelling(read.spelt, read.blanket)
        if problems:
            # the list's shape is wrong: the comment suppresses nothing
            return Directive(line, column, text, "invalid", problems=problems + read.problems, spelling=spelling)
        return Directive(line, column, text, "ignore", tuple(read.named), read.problems,
                         spelling=spelling if read.problems else None)
    # a bare `ignore`: the blanket form, if nothing but a reason follows
    text = head.rstrip()
    if not stripped or stripped.startswith(("--", "#")):
        if problems:
            return Directive(line, column, text, "invalid", problems=problems, spelling="# invariant-check: ignore")
        return Directive(line, column, text, "ignore", named=None)
    words = re.findall(r"[^\s,;|]+", stripped)
    leading = []
    for w in words:
        if resolve(w) or _CODE_SHAPE.fullmatch(w) or w.lower() in _BLANKET_TOKENS:
            leading.append(w)
        else:
            break
    if leading:
        m = re.match(r"(?:[^\s,;|]+[\s,;|]*){%d}" % len(leading), stripped)
        text = (head + gap + (m.group(0) if m else stripped)).rstrip().rstrip(",;|").rstrip()
        read = _read_tokens(leading)
        return Directive(line, column, text, "invalid",
                         problems=problems + ["codes go in square brackets right after `ignore`"] + read.problems,
                         spelling=_ignore_spelling(read.spelt))
    return Directive(line, column, (head + rest).rstrip(), "invalid",
                     problems=problems + ["text after a bare `ignore` (write `ignore[CODES]` for some rules, "
                                          "or `ignore -- reason` for every rule)"],
                     spelling="# invariant-check: ignore[CODE]")


def _noqa(line: int, column: int, m: re.Match[str]) -> Directive | None:
    sep, rest = m.group("sep"), m.group("rest")
    problems: list[str] = []
    if m.group("noqa") not in ("noqa", "NOQA"):
        pass  # flake8 and ruff read `noqa` in any case: so do we
    canonical_sep = re.fullmatch(r":[ \t]*", sep) is not None
    if canonical_sep:
        codes = _NOQA_CODES.match(rest)
        if codes is None:
            return None
        tokens = [t for t in re.split(r"[,\s]+", codes.group(0)) if t]
        ours = [t for t in tokens if _OUR_CODE.fullmatch(t)]
        if not ours:
            return None  # written for other tools only
        text = m.group(0)[: m.start("rest") - m.start() + codes.end()].rstrip()
        read = _read_tokens(ours)
        spelling = ("# noqa: " + ", ".join(t if not _OUR_CODE.fullmatch(t) else (canonical(t) or t) for t in tokens)) \
            if read.problems and read.spelt is not None else None
        return Directive(line, column, text, "noqa", tuple(read.named), read.problems, spelling=spelling)
    # `# noqa IC002`, `# noqa : IC002`, `# noqa=IC002`, `# noqa(IC002)`: flake8 reads most of
    # these as a bare noqa; only one that names our codes (or rules) is ours to report
    body = rest
    if sep.strip()[:1] in ("(", "["):
        closer = ")" if sep.strip()[:1] == "(" else "]"
        end = rest.find(closer)
        body = rest[:end] if end >= 0 else rest
    words = []
    for w in re.findall(r"[^\s,;|)\]]+", body):
        if _CODE_SHAPE.fullmatch(w) or resolve(w):
            words.append(w)
        else:
            break
    ours = [w for w in words if _OUR_CODE.fullmatch(w) or resolve(w)]
    if not ours:
        return None
    end = m.start("rest") - m.start()
    if words:
        mm = re.match(r"(?:[^\s,;|)\]]+[\s,;|]*){%d}" % len(words), rest)
        end += mm.end() if mm else 0
    text = m.group(0)[:end].rstrip().rstrip(",;|").rstrip()
    if sep.strip()[:1] in ("(", "[") and m.group(0)[end:end + 1] in (")", "]"):
        text += m.group(0)[end]
    if ":" in sep:
        problems.append("no space before the colon of `# noqa:`")
    else:
        problems.append("the codes follow `noqa:` (flake8 reads `noqa` without the colon as a bare `# noqa`)")
    names = [w for w in ours if not _OUR_CODE.fullmatch(w)]
    if names:
        problems.append("`# noqa:` takes codes, not rule names")
    read = _read_tokens([resolve(w) if w in names else w for w in ours])
    spelt = read.spelt
    spelling = "# noqa: " + ", ".join(dict.fromkeys(spelt)) if spelt else None
    return Directive(line, column, text, "invalid", problems=problems + read.problems, spelling=spelling)


def _other_tool(line: int, column: int, m: re.Match[str]) -> Directive | None:
    codes = _OUR_CODE_WORD.findall(m.group("body"))
    if not codes:
        return None
    tool = m.group("tool")
    text = m.group(0).rstrip()
    read = _read_tokens([c.upper() for c in codes])
    whose = _TOOLS.get(tool.lower(), tool.lower())
    return Directive(line, column, text, "invalid",
                     problems=[f"`# {tool}: ...` is {whose} syntax, which invariant-check does not read"],
                     spelling=_ignore_spelling(read.spelt))


def _parse_comment(line: int, col: int, comment: str) -> list[tuple[int, Directive]]:
    found: list[tuple[int, Directive]] = []
    taken: list[tuple[int, int]] = []

    def free(a: int) -> bool:
        return not any(s <= a < e for s, e in taken)

    lower = comment.lower()
    # the patterns run to the end of the comment (a reason may follow); the next search starts
    # after the text the directive took
    for needle, pattern, read in (("invariant", _HEAD_LOOSE, _head), ("noqa", _NOQA_LOOSE, _noqa)):
        if needle not in lower:
            continue
        pos = 0
        while True:
            m = pattern.search(comment, pos)
            if m is None:
                break
            d = read(line, col + m.start() + 1, m) if free(m.start()) else None
            if d is None:
                pos = m.start() + 1
                continue
            found.append((m.start(), d))
            taken.append((m.start(), m.start() + len(d.text)))
            pos = m.start() + max(1, len(d.text))
    if "ic" in lower:
        for m in _OTHER_TOOL.finditer(comment):
            if not free(m.start()):
                continue
            d = _other_tool(line, col + m.start() + 1, m)
            if d is not None:
                found.append((m.start(), d))
    return sorted(found, key=lambda item: item[0])


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
        for _, d in _parse_comment(line, col, comment):
            if d.kind == "skip-file":
                skip = True
            by_line.setdefault(line, []).append(d)
    return FileSuppressions(skip, by_line)
