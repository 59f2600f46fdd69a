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

Cost: a question about one range of a text is a bisection in an index of the whole text,
built once per text (`PerText`); the occurrences of a word come from one index of the text's
words once many words were asked about it (`text_words`), so asking about each of N names
costs O(N + len(text)), not O(N * len(text)). `Need.anchors` lets a caller go straight to
the definitions that hold an occurrence instead of asking every definition.
"""

from __future__ import annotations

import bisect
import re
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Callable, Iterable

from ..globs import name_matcher, name_regex, required_literals


class AnyLiteral:
    """`any(lit in data for lit in literals)`, asked of the fewest literals that answer it: one
    that holds another (`_seq_lens`, `seq_lens_cpu` hold `seq_lens`) is found wherever that
    one is, so only the minimal ones are looked for. The answer is the plain question's."""

    __slots__ = ("literals", "_minimal", "_common")

    def __init__(self, literals: Iterable[bytes]) -> None:
        self.literals = tuple(dict.fromkeys(literals))
        ordered = sorted(self.literals, key=len)
        minimal: list[bytes] = []
        for lit in ordered:
            if not any(m in lit for m in minimal):
                minimal.append(lit)
        self._minimal = tuple(minimal)
        # a part every literal holds (`_len` of `kv_len`, `ctx_len`, ...): a text without it
        # holds none of them, found in one search instead of one per literal
        self._common = _common_part(self._minimal) if len(self._minimal) > 2 else b""

    def __call__(self, data: bytes) -> bool:
        if self._common and self._common not in data:
            return False
        # the rules' needs ask about the same literals (the layout's field names) many times
        # per file: each is searched once per text
        known = _present_in(data)
        for lit in self._minimal:  # a loop, not `any(...)`: asked of every file, per rule
            got = known.get(lit)
            if got is None:
                got = known[lit] = lit in data
            if got:
                return True
        return False


_PRESENT: list = []  # (bytes, {literal: whether it occurs}) for the texts asked about last


def _present_in(data: bytes) -> dict[bytes, bool]:
    for known, found in _PRESENT:
        if known is data:
            return found
    found: dict[bytes, bool] = {}
    _PRESENT.insert(0, (data, found))
    del _PRESENT[2:]  # a file's bytes and their lower-cased copy
    return found


def _common_part(literals: tuple[bytes, ...]) -> bytes:
    """The longest substring (3 bytes or more) of the shortest literal that every literal
    holds; empty when there is none."""
    if not literals or not all(literals):
        return b""
    short = min(literals, key=len)
    for size in range(len(short), 2, -1):
        for i in range(len(short) - size + 1):
            part = short[i:i + size]
            if all(part in lit for lit in literals):
                return part
    return b""


class PerText:
    """Answers about a whole text, computed once and kept for the last few texts: a rule asks
    about a file and then about each of its definitions, and the answers for a range are a
    slice of the answers for the whole text."""

    def __init__(self, compute) -> None:
        self.compute = compute
        self._recent: list = []

    def __call__(self, text: str):
        for known, value in self._recent:
            if known is text:
                return value
        value = self.compute(text)
        self._recent.insert(0, (text, value))
        del self._recent[3:]
        return value


_EXCLUDED: list = []  # (text, span starts, spans): prose regions of texts asked about lately


def exclude(text: str, spans: list[tuple[int, int]]) -> None:
    """From now on, ignore what lies inside these spans of `text` (its docstrings and other
    multi-line strings: prose, not code). A file is first checked whole, spans included (a
    superset), then definition by definition without them."""
    for k, entry in enumerate(_EXCLUDED):
        if entry[0] is text and entry[2] is spans:
            # the same list again (an outline keeps its own): no new index of its starts
            if k:
                del _EXCLUDED[k]
                _EXCLUDED.insert(0, entry)
            return
    _EXCLUDED.insert(0, (text, [s for s, _ in spans], spans))
    del _EXCLUDED[3:]


@contextmanager
def also_excluded(text: str, spans: list[tuple[int, int]]):
    """Within the block, ignore these spans of `text` as well as those already excluded (the
    definitions between pieces of module-level code, when a need is asked of that code)."""
    saved = list(_EXCLUDED)
    current = next((e[2] for e in _EXCLUDED if e[0] is text), [])
    merged: list[tuple[int, int]] = []
    for s, e in sorted([*current, *spans]):
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    exclude(text, merged)
    try:
        yield
    finally:
        _EXCLUDED[:] = saved


def _inside(text: str, pos: int) -> bool:
    return _excluded_end(text, pos) >= 0


def _excluded_end(text: str, pos: int) -> int:
    """The end of the excluded span holding `pos`; -1 when none does."""
    for known, starts, spans in _EXCLUDED:
        if known is text:
            k = bisect.bisect_right(starts, pos) - 1
            if k >= 0 and spans[k][0] <= pos < spans[k][1]:
                return spans[k][1]
            return -1
    return -1


def _first_at(at: list[int], text: str, start: int, end: int) -> int:
    """The first position of a sorted list in [start, end) outside the excluded spans."""
    i = bisect.bisect_left(at, start)
    while i < len(at) and at[i] < end:
        if not _inside(text, at[i]):
            return at[i]
        i += 1
    return -1


# -- whole words of a text ---------------------------------------------------------------------

_TOKEN = re.compile(r"\w+")  # `\w`: a character for which `isalnum()` holds, or `_`
_INDEX_AFTER = 24  # distinct words found one by one in a text before its words are indexed


class TextWords:
    """Offsets of whole-word occurrences in one text (a word: not preceded or followed by a
    letter, digit or `_`). The first few words asked are found one by one (`str.find`, fast
    for a word or two); past `_INDEX_AFTER` distinct words, one pass over the text indexes
    every run of word characters, and a word made of word characters only is then looked up:
    its whole-word occurrences are exactly the runs equal to it."""

    __slots__ = ("found", "runs", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.found: dict[str, list[int]] = {}
        self.runs: dict[str, list[int]] | None = None

    def positions(self, word: str) -> list[int]:
        """Sorted offsets of the whole-word occurrences of `word` (do not modify)."""
        got = self.found.get(word)
        if got is not None:
            return got
        if self.runs is None and len(self.found) >= _INDEX_AFTER:
            runs: dict[str, list[int]] = {}
            for m in _TOKEN.finditer(self.text):
                runs.setdefault(m.group(), []).append(m.start())
            self.runs = runs
        if self.runs is not None and _TOKEN.fullmatch(word):
            got = self.runs.get(word, _NONE)
        else:
            got = _find_word(self.text, word)
        self.found[word] = got
        return got


_NONE: list[int] = []


def _find_word(text: str, word: str) -> list[int]:
    out = []
    k = len(word)
    if not k:
        return out
    pos = text.find(word)
    while pos >= 0:
        before = text[pos - 1 : pos] if pos else ""
        after = text[pos + k : pos + k + 1]
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            out.append(pos)
        pos = text.find(word, pos + 1)
    return out


_TEXT_WORDS: dict[int, TextWords] = {}  # by id(text), least recently used first
_TEXT_WORDS_KEPT = 64


def text_words(text: str) -> TextWords:
    """The word index of `text`, shared by every need and query that asks about its words;
    kept for the texts asked about lately (each entry holds its text, so an id is not reused
    while it is kept)."""
    key = id(text)
    got = _TEXT_WORDS.pop(key, None)
    if got is None or got.text is not text:
        got = TextWords(text)
        if len(_TEXT_WORDS) >= _TEXT_WORDS_KEPT:
            del _TEXT_WORDS[next(iter(_TEXT_WORDS))]
    _TEXT_WORDS[key] = got  # most recently used last
    return got


class Need:
    cost = 1  # relative cost of `holds`: All/Any try the cheap parts first

    def anchors(self, text: str) -> list[int] | None:
        """Sorted offsets such that the need holds in a range of `text` only if the range
        holds one of them (a word's occurrences); None when the need cannot tell."""
        return None

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
        object.__setattr__(self, "_index", PerText(self._all))

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
        return _first_at(self._index(text), text, start, end) >= 0

    def anchors(self, text: str) -> list[int]:
        return self._index(text)

    def _all(self, text: str) -> list[int]:
        """Offsets of every whole-word occurrence of the words, in order."""
        index = text_words(text)
        if len(self.words) == 1:
            return index.positions(self.words[0])
        return sorted(p for word in self.words for p in index.positions(word))

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
        end = len(text) if end is None else end
        pos = start
        while True:
            m = self.regex.search(text, pos, end)
            if m is None:
                return False
            skip = _excluded_end(text, m.start())
            if skip < 0:
                return True
            pos = max(skip, m.start() + 1)  # past the prose the match sits in

    def describe(self) -> str:
        return self._describe


MINUS_ONE = Pattern(r"-[\s(]*1(?![\w.])", "-", "`-1`")
@lru_cache(maxsize=256)
def word_of(name: str) -> Words:
    """One `Words` per name asked about while checking needs: its index of a text is then
    computed once, however many places ask about the name in that text."""
    return Words(name)


class Statement(Need):
    """A compound statement starting with `keyword`: the word first on its line (a loop
    statement always starts a logical line; `async for` too)."""

    def __init__(self, keyword: str) -> None:
        self.keyword = keyword
        self._lines = PerText(self._all)
        self._bytes = keyword.encode()
        # the keyword (a literal first: the regex engine finds it fast), then what precedes it
        # on its line must be indentation (or `async`)
        self._regex = re.compile(re.escape(keyword) + r"(?![\w])")
        self._prefix = re.compile(r"[ \t]*(?:async[ \t]+)?\Z")

    def quick(self, data: bytes, lower: bytes) -> bool:
        return self._bytes in data

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        return self.first(text, start, end) >= 0

    def first(self, text: str, start: int = 0, end: int | None = None) -> int:
        """Offset of the first such statement's line in the range; -1 if none."""
        end = len(text) if end is None else end
        return _first_at(self._lines(text), text, start, end)

    def _all(self, text: str) -> list[int]:
        """Line starts of every such statement in the text, in order."""
        out = []
        prefix = self._prefix
        for m in self._regex.finditer(text):
            pos = m.start()
            if pos and (text[pos - 1].isalnum() or text[pos - 1] == "_"):
                continue
            line_start = text.rfind("\n", 0, pos) + 1
            if prefix.match(text, line_start, pos):
                out.append(line_start)
        return out

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


_NAMES_INDEXES: dict[tuple, PerText] = {}


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
        self._any_literal = AnyLiteral(self._literals)
        # without a literal (a bare `*`) every identifier is a candidate: use the regex
        self._scan = all(self._text_literals)
        # rules that match the same globs (the metadata names of several rules) share one
        # index of a text
        key = (self.patterns, case_sensitive)
        shared = _NAMES_INDEXES.get(key)
        if shared is None:
            shared = _NAMES_INDEXES[key] = PerText(self._all)
        self._index = shared
        self._quick_for: bytes | None = None
        self._quick_answer = False

    def quick(self, data: bytes, lower: bytes) -> bool:
        # several atoms of one rule ask about the same bytes: answer once per file
        if self._quick_for is data:
            return self._quick_answer
        hay = data if self.case_sensitive else lower
        answer = self._any_literal(hay)  # b"" (a bare `*`) is always in
        self._quick_for, self._quick_answer = data, answer
        return answer

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        for _ in self.occurrences(text, start, end):
            return True
        return False

    def occurrences(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
        """(start, end) of each identifier in the range that matches the globs."""
        end = len(text) if end is None else end
        found, starts = self._index(text)
        i = bisect.bisect_left(starts, start)
        j = bisect.bisect_left(starts, end)
        return [span for span in found[i:j] if span[1] <= end and not _inside(text, span[0])]

    def _all(self, text: str) -> tuple[list[tuple[int, int]], list[int]]:
        if not self._scan:
            found = [(m.start(), m.end()) for m in self._regex.finditer(text)]
        else:
            found = sorted(set(self._occurrences(text, 0, len(text))))
        return found, [a for a, _ in found]

    def _occurrences(self, text: str, start: int, end: int):
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
        self._recent: list = []

    def quick(self, data: bytes, lower: bytes) -> bool:
        return self.names.quick(data, lower)

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        end = len(text) if end is None else end
        in_context = self._contexts(text)
        return any(in_context(a, b) for a, b in self.names.occurrences(text, start, end))

    def _contexts(self, text: str):
        """A memoised test of one occurrence's context, read on the whole text (so the answer
        does not depend on the range asked about: a definition's range never cuts a line)."""
        for known, fn in self._recent:
            if known is text:
                return fn
        memo: dict[int, bool] = {}

        def in_context(a: int, b: int) -> bool:
            got = memo.get(a)
            if got is None:
                got = memo[a] = self._in_context(text, a, b)
            return got

        self._recent.insert(0, (text, in_context))
        del self._recent[3:]
        return in_context

    def _in_context(self, text: str, a: int, b: int) -> bool:
        if self.after is not None and self.after.match(text, b):
            return True
        if self.before is not None:
            line_start = text.rfind("\n", 0, a) + 1
            if self.before_words and not any(text.find(w, line_start, a) >= 0 for w in self.before_words):
                return False
            if self.before.search(text, line_start, a):
                return True
        return False

    def describe(self) -> str:
        return self._describe or f"{self.names.describe()} in context"


_BIND_AFTER = (
    r"(?:[\s)\]]*|\s*\[[^\n]*?\][\s)\]]*)"
    r"(?:=(?!=)|(?://|\*\*|>>|<<|[-+*/%&|^@])=|:=|:[^\n=]*=(?!=))"
    r"|[\s)\]]*,[\w\s,.*()\[\]]*?=(?!=)"
    r"|[\s,)\]]*\bin\b"
)
_BIND_BEFORE = r"\b(?:for|as|import|def|class|case)\b"


_BIND_WORDS = ("for", "as", "import", "def", "class", "case")


_WALRUS = re.compile(r"[ \t]*:=")


def bound(names: Names) -> Around:
    return Around(names, after=_BIND_AFTER, before=_BIND_BEFORE, before_words=_BIND_WORDS,
                  describe=f"{names.describe()} bound")


# what follows a name a statement binds to a call's result (`md = self._build(cad)`, `md:
# T = f()`, `per_layer, md = f()`, also over continued lines), or a walrus binds: a `(`
# somewhere in the value (a superset of a call)
_CALL_AHEAD = r"(?:[^\n]|\\\n)*\("
_BIND_CALL_AFTER = (
    r"[\s)\]]*(?:=(?!=)|:[^\n=]*=(?!=))" + _CALL_AHEAD
    + r"|[\s)\]]*,[\w\s,.*()\[\]]*?=(?!=)" + _CALL_AHEAD
    + r"|[ \t]*:="
)


def bound_from_call(names: Names) -> Around:
    """A name matching `names` bound to what a call returns, or by a walrus (what
    `values.LastValues` follows into the callee's loop)."""
    return Around(names, after=_BIND_CALL_AFTER, describe=f"{names.describe()} bound to a call's result")


class LoopLeftover(Around):
    """What `values.LastValues` calls a loop leftover needs in its function's text: a name
    (matching `names`) bound after the first loop statement (a loop's body and target come
    after its header), or by a walrus anywhere (one in a comprehension binds in the function),
    and read again after the line that binds it (the check comes after the loop). `for` and
    `while` statements as `Statement` finds them."""

    cost = 9

    def __init__(self, names: Names) -> None:
        super().__init__(names, after=_BIND_AFTER, before=_BIND_BEFORE, before_words=_BIND_WORDS)
        # the shared instances: their per-text indexes are computed once per file
        self._loops = (FOR_STATEMENT, WHILE_STATEMENT)

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        end = len(text) if end is None else end
        first = min((p for p in (s.first(text, start, end) for s in self._loops) if p >= 0), default=end)
        in_context = self._contexts(text)
        for a, b in self.names.occurrences(text, start, end):
            # a walrus in a comprehension binds in the function, with no loop statement
            if (a < first and not _WALRUS.match(text, b)) or not in_context(a, b):
                continue
            line_end = text.find("\n", b, end)
            if line_end >= 0 and word_of(text[a:b]).holds(text, line_end, end):
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

    def anchors(self, text: str) -> list[int] | None:
        # every part must hold: the anchors of any one part will do (the fewest)
        best = None
        for p in self.parts:
            got = p.anchors(text)
            if got is not None and (best is None or len(got) < len(best)):
                best = got
        return best

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

    def anchors(self, text: str) -> list[int] | None:
        # one part must hold: the anchors of all parts, when each has some
        out: list[int] = []
        for p in self.parts:
            got = p.anchors(text)
            if got is None:
                return None
            out.extend(got)
        return sorted(set(out))

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


class Call(Need):
    """A call of a bare name (`isinstance(`, not `x.isinstance(` or `my_isinstance(`)."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self._bytes = tuple(n.encode() for n in names)
        self._index = PerText(self._all)
        self._paren = re.compile(r"\s*\(")

    def quick(self, data: bytes, lower: bytes) -> bool:
        return any(b in data for b in self._bytes)

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        end = len(text) if end is None else end
        return _first_at(self._index(text), text, start, end) >= 0

    def _all(self, text: str) -> list[int]:
        out = []
        for name in self.names:
            k = len(name)
            pos = text.find(name)
            while pos >= 0:
                before = text[pos - 1 : pos] if pos else ""
                if not (before.isalnum() or before in ("_", ".")) and self._paren.match(text, pos + k):
                    out.append(pos)
                pos = text.find(name, pos + 1)
        return sorted(out)

    def describe(self) -> str:
        return " | ".join(f"`{n}(`" for n in self.names)


# a call of isinstance() or type() (not `x.type`, not `dtype`)
TYPE_CALL = Call("isinstance", "type")
# `match md:` (a type check with class patterns): `match` first on its line, then a subject
# (not `match = ...`, `match.group(1)`, `match,`)
MATCH_STATEMENT = Pattern(r"(?m)^[ \t]*match(?:[ \t]+(?![ \t]|[=,.)\]:])|(?=[(\[{]))", "match", "a `match` statement")
