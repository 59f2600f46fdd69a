"""What a rule needs to see in a definition's text before it can report there.

A rule declares its needs as a formula over three atoms, built from the same objects its query
uses to match names, so the two cannot disagree (as semgrep derives the literals a file must
hold from a rule's patterns):

- `Words("set_skip_topk")`: one of these words occurs (a name, a keyword, an attribute);
- `Names(["*metadata*"], case_sensitive=False)`: an identifier matching one of these globs
  occurs; the rule tests names with `Names.matches`, the same globs;
- `All(...)` / `Any(...)` combine them.

The engine evaluates a rule's formula twice: on the raw bytes of a file (`quick`: only the
literal parts, a necessary condition), then on the text of each chunk of the outline
(`holds`: whole words and identifiers). A chunk's text contains all of its definitions'
text, and every atom is monotone, so a definition the rule could report in is never skipped.
`tests/test_prefilter_property.py` checks this on generated programs and on the mutation
fixtures: findings with the prefilter equal findings with every definition parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Callable, Iterable

from ..globs import name_matcher, name_regex, required_literals


class Need:
    cost = 1  # relative cost of `holds`: All/Any try the cheap parts first

    def quick(self, data: bytes, lower: bytes) -> bool:
        """A necessary condition on a file's raw bytes (and their lower-cased copy)."""
        raise NotImplementedError

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        """Whether the text between `start` and `end` satisfies the need."""
        raise NotImplementedError

    def holds_in(self, text: str, ranges: list[tuple[int, int]]) -> bool:
        """Whether the text of these ranges, taken together, satisfies the need."""
        return any(self.holds(text, s, e) for s, e in ranges)

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Words(Need):
    words: tuple[str, ...]

    def __init__(self, *words: str) -> None:
        object.__setattr__(self, "words", tuple(w for w in words if w))

    @cached_property
    def _bytes(self) -> tuple[bytes, ...]:
        return tuple(w.encode() for w in self.words)

    @cached_property
    def _regex(self) -> re.Pattern[str]:
        body = "|".join(re.escape(w) for w in sorted(self.words, key=len, reverse=True))
        return re.compile(rf"(?<![\w])(?:{body})(?![\w])" if body else r"(?!)")

    def quick(self, data: bytes, lower: bytes) -> bool:
        return any(w in data for w in self._bytes)

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        end = len(text) if end is None else end
        for word in self.words:
            k = len(word)
            pos = text.find(word, start, end)
            while pos >= 0:
                before = text[pos - 1 : pos] if pos > start else ""
                after = text[pos + k : pos + k + 1]
                if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
                    return True
                pos = text.find(word, pos + 1, end)
        return False

    def describe(self) -> str:
        return " | ".join(f"`{w}`" for w in self.words) or "nothing"


class Pattern(Need):
    """Text matching a regex, for shapes no word names (`-1` also written `- 1`); `literal` is
    a substring every match contains (the quick check on raw bytes)."""

    cost = 4

    def __init__(self, regex: str, literal: str, describe: str) -> None:
        self.regex = re.compile(regex)
        self.literal = literal.encode()
        self._describe = describe

    def quick(self, data: bytes, lower: bytes) -> bool:
        return self.literal in data

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        return self.regex.search(text, start, len(text) if end is None else end) is not None

    def describe(self) -> str:
        return self._describe


MINUS_ONE = Pattern(r"-[\s(]*1(?![\w.])", "-", "`-1`")
class Statement(Need):
    """A compound statement starting with `keyword`: the word first on its line (a loop
    statement always starts a logical line; `async for` too)."""

    def __init__(self, keyword: str) -> None:
        self.keyword = keyword
        self._recent: list = []
        self._bytes = keyword.encode()
        self._prefix = re.compile(r"[ \t]*(?:async[ \t]+)?\Z")

    def quick(self, data: bytes, lower: bytes) -> bool:
        return self._bytes in data

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        return self.first(text, start, end) >= 0

    def first(self, text: str, start: int = 0, end: int | None = None) -> int:
        """Offset of the first such statement's line in the range; -1 if none."""
        end = len(text) if end is None else end
        key = (id(text), start, end)
        for k, v in self._recent:
            if k == key and v[0] is text:
                return v[1]
        found = self._first(text, start, end)
        self._recent.insert(0, (key, (text, found)))
        del self._recent[8:]
        return found

    def _first(self, text: str, start: int, end: int) -> int:
        k = len(self.keyword)
        pos = text.find(self.keyword, start, end)
        while pos >= 0:
            after = text[pos + k : pos + k + 1]
            if not (after.isalnum() or after == "_"):
                line_start = text.rfind("\n", 0, pos) + 1
                if self._prefix.match(text, line_start, pos):
                    return max(start, line_start)
            pos = text.find(self.keyword, pos + k, end)
        return -1

    def describe(self) -> str:
        return f"a `{self.keyword}` statement"


FOR_STATEMENT = Statement("for")
WHILE_STATEMENT = Statement("while")


class AfterLoop(Need):
    """`need` holds in the text from the first loop statement on: what a loop leaves behind is
    checked after the loop's header (its body, then the code after it, come later)."""

    def __init__(self, need: Need) -> None:
        self.need = need
        self.cost = need.cost + 2
        self._loops = (FOR_STATEMENT, WHILE_STATEMENT)

    def quick(self, data: bytes, lower: bytes) -> bool:
        return (b"for" in data or b"while" in data) and self.need.quick(data, lower)

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        end = len(text) if end is None else end
        first = min((p for p in (s.first(text, start, end) for s in self._loops) if p >= 0), default=-1)
        return first >= 0 and self.need.holds(text, first, end)

    def describe(self) -> str:
        return f"after a loop statement: ({self.need.describe()})"



LAST_INDEX = Pattern(r"\[[\s(]*-[\s(]*1[\s)]*\]", "-", "a `[-1]` subscript")
NEXT_OF_ITER = Pattern(r"next\s*\(\s*(?:iter|reversed)\s*\(", "next", "`next(iter(...))`")


class Names(Need):
    """Identifiers matching globs; `matches` is what the rule's query calls."""

    cost = 3

    def __init__(self, patterns: Iterable[str], *, case_sensitive: bool) -> None:
        self.patterns = tuple(patterns)
        self.case_sensitive = case_sensitive
        self.matches: Callable[[str], bool] = name_matcher(self.patterns, case_sensitive=case_sensitive)
        flags = 0 if case_sensitive else re.IGNORECASE
        body = "|".join(f"(?:{name_regex(p)})" for p in self.patterns)
        self._regex = re.compile(rf"(?<![\w])(?:{body})(?![\w])" if body else r"(?!)", flags)
        literals = []
        for p in self.patterns:
            runs = required_literals(p)
            # the longest run is the most selective necessary literal of this glob
            literals.append(max(runs, key=len) if runs else "")
        fold = (lambda x: x) if case_sensitive else str.lower
        folded = list(dict.fromkeys(fold(lit) for lit in literals))
        # a literal that contains another is found through the shorter one
        self._text_literals = tuple(
            lit for lit in folded if not any(o != lit and o and o in lit for o in folded)
        )
        self._literals = tuple(lit.encode() for lit in self._text_literals)
        # without a literal (a bare `*`) every identifier is a candidate: use the regex
        self._scan = all(self._text_literals)
        self._recent: list = []
        self._ident = re.compile(r"[\w]+")

    def quick(self, data: bytes, lower: bytes) -> bool:
        hay = data if self.case_sensitive else lower
        return any(lit in hay for lit in self._literals)  # b"" (a bare `*`) is always in

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        for _ in self.occurrences(text, start, end):
            return True
        return False

    def occurrences(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
        """(start, end) of each identifier in the range that matches the globs (the last few
        answers are kept: several atoms of one rule ask about the same range)."""
        end = len(text) if end is None else end
        key = (id(text), start, end)
        for k, v in self._recent:
            if k == key and v[0] is text:
                return v[1]
        found = list(self._occurrences(text, start, end))
        self._recent.append((key, (text, found)))
        if len(self._recent) > 8:
            self._recent.pop(0)
        return found

    def _occurrences(self, text: str, start: int, end: int):
        if not self._scan:
            for m in self._regex.finditer(text, start, end):
                yield m.start(), m.end()
            return
        # find each literal (fast), widen it to its identifier, test that identifier
        for lit in self._text_literals:
            pos = _find(text, lit, start, end, self.case_sensitive)
            while pos >= 0:
                lo = max(start, pos - 256)
                a = pos - _WORD.match(text[lo:pos][::-1]).end()
                b = _WORD.match(text, pos + len(lit), end).end()
                if self.matches(text[a:b]):
                    yield a, b
                pos = _find(text, lit, b, end, self.case_sensitive)

    def describe(self) -> str:
        case = "" if self.case_sensitive else " (any case)"
        return "a name like " + " | ".join(f"`{p}`" for p in self.patterns) + case

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Names)
            and other.patterns == self.patterns
            and other.case_sensitive == self.case_sensitive
        )

    def __hash__(self) -> int:
        return hash((self.patterns, self.case_sensitive))


class Around(Need):
    """An identifier matching `names` in a given context: `after` matches right after it, or
    `before` matches the text of its line up to it. Used for syntax a rule needs around a
    name (a binding, a one-entry pick); each context is a superset of what the parser calls
    by that syntax, documented where it is defined."""

    cost = 8

    def __init__(
        self,
        names: Names,
        *,
        after: str | None = None,
        before: str | None = None,
        before_words: tuple[str, ...] = (),
        describe: str = "",
    ) -> None:
        self.names = names
        self.after = re.compile(after) if after else None
        self.before = re.compile(before) if before else None
        self.before_words = before_words  # `before` can only match a line holding one of these
        self._describe = describe

    def quick(self, data: bytes, lower: bytes) -> bool:
        return self.names.quick(data, lower)

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        end = len(text) if end is None else end
        for a, b in self.names.occurrences(text, start, end):
            if self._in_context(text, a, b, start, end):
                return True
        return False

    def _in_context(self, text: str, a: int, b: int, start: int, end: int) -> bool:
        if self.after is not None and self.after.match(text, b, end):
            return True
        if self.before is not None:
            line_start = max(start, text.rfind("\n", 0, a) + 1)
            if self.before_words and not any(text.find(w, line_start, a) >= 0 for w in self.before_words):
                return False
            if self.before.search(text, line_start, a):
                return True
        return False

    def describe(self) -> str:
        return self._describe or f"{self.names.describe()} in context"


# Where a name is bound (a superset): followed, maybe after closing brackets or a subscript,
# by `=` (not `==`), an augmented `op=`, `:=`, `: annotation =`; followed by `, other targets =`
# or by `in` (a `for` target); or preceded on its line by `for`, `as`, `import`, `def`,
# `class`, `case` (loop and comprehension targets, with/except/import aliases, walrus).
_BIND_AFTER = (
    r"(?:[\s)\]]*|\s*\[[^\n]*?\][\s)\]]*)"
    r"(?:=(?!=)|(?://|\*\*|>>|<<|[-+*/%&|^@])=|:=|:[^\n=]*=(?!=))"
    r"|[\s)\]]*,[\w\s,.*()\[\]]*?=(?!=)"
    r"|[\s,)\]]*\bin\b"
)
_BIND_BEFORE = r"\b(?:for|as|import|def|class|case)\b"


_BIND_WORDS = ("for", "as", "import", "def", "class", "case")


def bound(names: Names) -> Around:
    return Around(names, after=_BIND_AFTER, before=_BIND_BEFORE, before_words=_BIND_WORDS,
                  describe=f"{names.describe()} bound")


class LoopLeftover(Around):
    """What `values.LastValues` calls a loop leftover needs in its function's text: a name
    (matching `names`) bound after the first loop statement (a loop's body and target come
    after its header) and read again after the line that binds it (the check comes after the
    loop). `for` and `while` statements as `Statement` finds them."""

    cost = 9

    def __init__(self, names: Names) -> None:
        super().__init__(names, after=_BIND_AFTER, before=_BIND_BEFORE, before_words=_BIND_WORDS)
        self._loops = (Statement("for"), Statement("while"))

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        end = len(text) if end is None else end
        first = min((p for p in (s.first(text, start, end) for s in self._loops) if p >= 0), default=-1)
        if first < 0:
            return False
        for a, b in self.names.occurrences(text, first, end):
            if not self._in_context(text, a, b, start, end):
                continue
            line_end = text.find("\n", b, end)
            if line_end >= 0 and Words(text[a:b]).holds(text, line_end, end):
                return True
        return False

    def describe(self) -> str:
        return f"{self.names.describe()} bound in a loop and read after it"


# One entry picked out of a collection named by `names`: `d[...-1...]`, `d.values())[-1]`,
# `next(iter(d...` / `next(reversed(d...`, `next(iter(list(d...`.
_PICK_AFTER = r"(?:\s*\.\s*(?:values|items|keys)\s*\(\s*\))?\s*\)?\s*\[[^\]]*?-[\s(]*1(?![\w.])"
_PICK_BEFORE = r"\bnext\s*\(\s*(?:iter|reversed)\s*\(\s*(?:(?:list|tuple)\s*\(\s*)?$"


def subscripted(names: Names) -> Around:
    """A collection named by `names`, subscripted (`per_layer_md[layer_name]`)."""
    return Around(names, after=r"\s*\[", describe=f"{names.describe()} subscripted")


def picked(names: Names) -> Around:
    return Around(names, after=_PICK_AFTER, before=_PICK_BEFORE, before_words=("next",),
                  describe=f"one entry of {names.describe()}")


_WORD = re.compile(r"\w*")

_LOWER: list = []  # (text, its lower-cased copy or None): the raw and the masked text of a file


def _lowered(text: str) -> str | None:
    """`text.lower()` with the same offsets, cached for the texts last asked."""
    for known, low in _LOWER:
        if known is text:
            return low
    low = text.lower()
    # a few characters lower to two (`İ`): then offsets would shift, so search by regex
    entry = (text, low if len(low) == len(text) else None)
    _LOWER.insert(0, entry)
    del _LOWER[2:]
    return entry[1]


def _find(text: str, literal: str, start: int, end: int, case_sensitive: bool) -> int:
    if case_sensitive:
        return text.find(literal, start, end)
    low = _lowered(text)
    if low is not None:
        return low.find(literal, start, end)
    m = _ci_regex(literal).search(text, start, end)
    return m.start() if m else -1


@lru_cache(maxsize=64)
def _ci_regex(literal: str) -> re.Pattern[str]:
    return re.compile(re.escape(literal), re.IGNORECASE)


@dataclass(frozen=True)
class All(Need):
    parts: tuple[Need, ...]

    def __init__(self, *parts: Need) -> None:
        object.__setattr__(self, "parts", tuple(sorted(parts, key=lambda p: p.cost)))

    @property
    def cost(self) -> int:
        return sum(p.cost for p in self.parts)

    def quick(self, data: bytes, lower: bytes) -> bool:
        return all(p.quick(data, lower) for p in self.parts)

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        return all(p.holds(text, start, end) for p in self.parts)

    def holds_in(self, text: str, ranges: list[tuple[int, int]]) -> bool:
        return all(p.holds_in(text, ranges) for p in self.parts)

    def describe(self) -> str:
        return " and ".join(f"({p.describe()})" for p in self.parts)


@dataclass(frozen=True)
class Any(Need):
    parts: tuple[Need, ...]

    def __init__(self, *parts: Need) -> None:
        object.__setattr__(self, "parts", tuple(sorted(parts, key=lambda p: p.cost)))

    @property
    def cost(self) -> int:
        return sum(p.cost for p in self.parts)

    def quick(self, data: bytes, lower: bytes) -> bool:
        return any(p.quick(data, lower) for p in self.parts)

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        return any(p.holds(text, start, end) for p in self.parts)

    def holds_in(self, text: str, ranges: list[tuple[int, int]]) -> bool:
        return any(p.holds_in(text, ranges) for p in self.parts)

    def describe(self) -> str:
        return " or ".join(f"({p.describe()})" for p in self.parts)


class Everything(Need):
    """No prefilter: every definition is read (the reference the property test compares to)."""

    def quick(self, data: bytes, lower: bytes) -> bool:
        return True

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        return True

    def holds_in(self, text: str, ranges: list[tuple[int, int]]) -> bool:
        return True

    def describe(self) -> str:
        return "anything"


# a call of isinstance() or type() (not `x.type`, not `dtype`)
TYPE_CALL = Any(
    Pattern(r"(?<![\w.])isinstance\s*\(", "isinstance", "`isinstance(`"),
    Pattern(r"(?<![\w.])type\s*\(", "type", "`type(`"),
)
