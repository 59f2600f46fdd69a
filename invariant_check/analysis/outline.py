"""Where a module's definitions start, found from its text, and how to parse one of them.

Parsing is what a lint run spends its time on (the stdlib parser reads about 4 MB/s here), and
a rule can only fire in a few definitions of a file. The outline splits a module into *chunks*
without parsing it:

- top level: the head (everything before the first definition), then one chunk per top-level
  `def`/`class` (with its decorators), each running to the next top-level definition;
- inside a top-level class: the class head (decorators, header, body statements before the
  first method), then one chunk per method (or nested class) at the body's indentation.

A chunk may hold more than its definition (the module code after a function, the class
attributes after a method) but never less, and always whole statements, so it parses on its
own and its text contains all of its definition's text.

Why the boundaries are exact: a line that starts with `def`, `class` or `async def` at the
chunk level is a statement start unless it lies inside a string that spans lines (inside
brackets it would be a syntax error); a decorator line is one only if a definition follows it.
So the only thing to know is where the multi-line strings are, which a small lexer finds
(`multiline_strings`). A file it cannot model (a single-quoted string continued with a
backslash) is one chunk; so is a file whose chunks do not parse, which is then parsed whole.
`tests/test_outline.py` checks, on every file of a vLLM release and on generated programs, that
the chunks' definitions are exactly the whole file's.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass

HEAD, DEF, CLASS = "head", "def", "class"

_CODE_LINE = re.compile(r"\n(?=[^ \t\n#\f\\])")
_DEF_WORD = re.compile(r"(?:async[ \t]+def|def|class)[ \t]+([A-Za-z_\w]*)")
_LINE_INTEREST = re.compile(r"[#'\"]")
_SINGLE_BODY = {'"': re.compile(r'(?:[^"\\\n]|\\.)*"'), "'": re.compile(r"(?:[^'\\\n]|\\.)*'")}


class Unmodelled(Exception):
    """The lexer's model of strings does not cover this file."""


def _triple_end(text: str, quote: str, start: int) -> int:
    """End offset of a triple-quoted string whose body starts at `start`; -1 if unterminated."""
    find = text.find
    j = start
    while True:
        k = find(quote, j)
        if k < 0:
            return -1
        b = k - 1
        while b >= start and text[b] == "\\":
            b -= 1
        if (k - 1 - b) % 2 == 0:
            return k + 3
        j = k + 1


def multiline_strings(text: str) -> list[tuple[int, int]]:
    """(start, end) of each triple-quoted string that spans lines, in order.

    Only triple quotes can open such a string; each one found is checked to be code (not in a
    comment or a one-line string) by lexing its own line up to it. Raises `Unmodelled` for a
    one-line string continued on the next line with a backslash.
    """
    occurrences = []
    for quote in ('"""', "'''"):
        i = text.find(quote)
        while i >= 0:
            occurrences.append(i)
            i = text.find(quote, i + 1)
    if not occurrences:
        if "\\\n" in text:
            _check_continuations(text)
        return []
    occurrences.sort()
    out: list[tuple[int, int]] = []
    n = len(text)
    pos = 0  # everything before pos is lexed
    rfind, find = text.rfind, text.find
    idx = 0
    while idx < len(occurrences):
        i = occurrences[idx]
        idx += 1
        if i < pos:
            continue
        line_start = rfind("\n", 0, i) + 1
        j = max(line_start, pos)
        in_code = True
        while True:
            m = _LINE_INTEREST.search(text, j, i)
            if m is None:
                break
            k = m.start()
            ch = text[k]
            if ch == "#":
                in_code = False
                break
            if text.startswith(ch * 3, k):
                break  # another triple quote earlier on the line: found in order, never here
            body = _SINGLE_BODY[ch].match(text, k + 1)
            if body is None:
                line_end = find("\n", k)
                if line_end > 0 and text[line_end - 1] == "\\":
                    raise Unmodelled("a string continued with a backslash")
                in_code = False  # an unterminated string: a syntax error the parser reports
                break
            if body.end() > i:
                in_code = False  # the triple quote sits inside a one-line string
                break
            j = body.end()
        if not in_code:
            line_end = find("\n", i)
            pos = n if line_end < 0 else line_end + 1
            continue
        quote = text[i : i + 3]
        end = _triple_end(text, quote, i + 3)
        if end < 0:
            out.append((i, n))
            break
        if find("\n", i, end) >= 0:
            out.append((i, end))
        pos = end
    if "\\\n" in text:
        _check_continuations(text, out)
    return out


def _check_continuations(text: str, strings: list[tuple[int, int]] = ()) -> None:
    """A backslash at a line end outside a multi-line string: fine when it continues code,
    `Unmodelled` when it continues a one-line string."""
    starts = [s for s, _ in strings]
    i = text.find("\\\n")
    while i >= 0:
        k = bisect.bisect_right(starts, i) - 1
        if not (k >= 0 and strings[k][0] <= i < strings[k][1]):
            line_start = text.rfind("\n", 0, i) + 1
            j = line_start
            while True:
                m = _LINE_INTEREST.search(text, j, i)
                if m is None:
                    break
                if text[m.start()] == "#":
                    break
                body = _SINGLE_BODY[text[m.start()]].match(text, m.start() + 1)
                if body is None or body.end() > i:
                    raise Unmodelled("a string continued with a backslash")
                j = body.end()
        i = text.find("\\\n", i + 2)


@dataclass
class Chunk:
    """A run of whole statements of one module; offsets index `Source.text`."""

    index: int
    kind: str  # HEAD, DEF or CLASS
    name: str | None
    start: int
    end: int
    line: int  # 1-based line of `start`
    indent: int  # column of its statements: 0 at top level, the class body's inside a class
    parent: int | None = None  # the class chunk a method chunk belongs to
    keyword: int = 0  # offset of its `def`/`class` keyword (after any decorators)
    # appended when parsing: the head of a split class needs a body statement of its own
    filler: str = ""
    # code besides the definition itself: module code after a top-level definition (or
    # after a class, in its last method chunk), class attributes after a method
    extra_module: bool = False
    extra_class: bool = False
    span_end: int = 0  # a top-level class: the end of all of its chunks
    split: bool = False  # a top-level class: its methods have been found

    @property
    def key(self) -> str:
        """Stable across runs for the same bytes (facts are cached under it)."""
        return f"{self.start}:{self.kind}"


class Outline:
    """The chunks of a module. A top-level class is split into its methods only when asked
    (`children`), and always before any of its chunks is parsed."""

    def __init__(self, text: str, chunks: list[Chunk], strings: list[tuple[int, int]] | None = None, whole: bool = False) -> None:
        self.text = text
        self.chunks = chunks
        self.strings = strings or []
        self.whole = whole
        self._starts = [s for s, _ in self.strings]
        self._masked: str | None = None
        # lookups asked once per definition of a large file: kept, not recomputed (the
        # top-level chunks never change; a class's chunks are added once, when it is split)
        self._top: list[Chunk] | None = None
        self._top_starts: list[int] | None = None
        self._named: dict[str | None, list[Chunk]] | None = None
        self._kids: dict[int, list[Chunk]] = {}
        self._kid_index: dict[int, tuple[list[int], dict[str | None, list[Chunk]]]] = {}
        self._prose: list[tuple[int, int]] | None = None

    def top(self) -> list[Chunk]:
        """The top-level chunks, in order (do not modify the list)."""
        if self._top is None:
            self._top = [c for c in self.chunks if c.parent is None]
        return self._top

    def top_at(self, pos: int) -> Chunk | None:
        """The top-level chunk whose span (a class's methods included) holds offset `pos`:
        the top-level chunks tile the text."""
        if self._top_starts is None:
            self._top_starts = [c.start for c in self.top()]
        k = bisect.bisect_right(self._top_starts, pos) - 1
        return self._top[k] if k >= 0 else None

    def named(self, name: str) -> list[Chunk]:
        """The top-level chunks defining `name`, in order (do not modify the list)."""
        if self._named is None:
            self._named = {}
            for c in self.top():
                self._named.setdefault(c.name, []).append(c)
        return self._named.get(name, [])

    def children(self, chunk: Chunk) -> list[Chunk]:
        """The chunks of a top-level class, in order, the class split first if it was not
        (do not modify the list)."""
        if chunk.kind == CLASS and chunk.parent is None and not chunk.split and not self.whole:
            chunk.split = True
            before = len(self.chunks)
            _split_class(self.text, self, chunk, self.strings, self._starts)
            if len(self.chunks) > before:
                self._kids[chunk.index] = self.chunks[before:]
        return self._kids.get(chunk.index, [])

    def _kid_lookup(self, chunk: Chunk) -> tuple[list[int], dict[str | None, list[Chunk]]]:
        got = self._kid_index.get(chunk.index)
        if got is None:
            kids = self.children(chunk)
            by_name: dict[str | None, list[Chunk]] = {}
            for c in kids:
                by_name.setdefault(c.name, []).append(c)
            got = self._kid_index[chunk.index] = ([c.start for c in kids], by_name)
        return got

    def child_named(self, chunk: Chunk, name: str) -> list[Chunk]:
        """The chunks of a top-level class defining `name`, in order."""
        return self._kid_lookup(chunk)[1].get(name, [])

    def child_at(self, chunk: Chunk, pos: int) -> Chunk | None:
        """The chunk of a top-level class (not its head) that holds offset `pos`: a class's
        chunks tile the text from its first method to the end of the class."""
        starts, _ = self._kid_lookup(chunk)
        k = bisect.bisect_right(starts, pos) - 1
        return self._kids[chunk.index][k] if k >= 0 else None

    def exclude_prose(self) -> None:
        """Tell the needs to ignore this module's multi-line strings but f-strings (prose in
        docstrings is not code a rule could need); see `needs.exclude`."""
        from .needs import exclude

        if self._prose is None:
            self._prose = [(s, e) for s, e in self.strings if not _is_fstring(self.text, s)]
        exclude(self.text, self._prose)

    def masked(self) -> str:
        """The text with every multi-line string but f-strings blanked (newlines kept, same
        offsets): prose in docstrings is not code a rule could need."""
        if self._masked is None:
            parts, at = [], 0
            text = self.text
            for s, e in self.strings:
                if _is_fstring(text, s):
                    continue
                parts.append(text[at:s])
                parts.append(_NOT_NEWLINE.sub(" ", text[s:e]))
                at = e
            parts.append(text[at:])
            self._masked = "".join(parts)
        return self._masked


_NOT_NEWLINE = re.compile(r"[^\n]")


def _is_fstring(text: str, quote: int) -> bool:
    """Whether the string whose quotes start at `quote` has an f prefix (`f`, `rf`, `Fr`...)."""
    i = quote
    while i > 0 and text[i - 1].isalpha() and quote - i < 2:
        i -= 1
    return "f" in text[i:quote].lower()


def _in_string(strings: list[tuple[int, int]], starts: list[int], pos: int) -> bool:
    k = bisect.bisect_right(starts, pos) - 1
    return k >= 0 and strings[k][0] < pos < strings[k][1]


def _line_start_positions(text: str, pattern: re.Pattern[str], lo: int, hi: int) -> list[int]:
    out = [m.end() for m in pattern.finditer(text, max(lo - 1, 0), hi)]
    if lo == 0 and text[:1] and text[:1] not in " \t\n#\f\\":
        out.insert(0, 0)
    return [p for p in out if lo <= p < hi]


def _boundaries(text: str, code_lines: list[int], indent: int, strings, starts) -> list[tuple[int, int, str, str]]:
    """(offset of the first line, offset of the keyword, kind, name) of each definition at
    `indent`, its decorators included."""
    out: list[tuple[int, int, str, str]] = []
    pending: int | None = None  # first line of a run of decorators
    for pos in code_lines:
        if _in_string(strings, starts, pos):
            continue
        p = pos + indent
        m = _DEF_WORD.match(text, p)
        if m is not None and not m.group(1):
            m = None  # `class \` with the name on the next line: left inside its neighbour
            pending = None
            continue
        if m is not None:
            kind = CLASS if text.startswith("class", p) else DEF
            out.append((pending if pending is not None else pos, p, kind, m.group(1)))
            pending = None
        elif text.startswith("@", p):
            if pending is None:
                pending = pos
        elif text[p : p + 1] in (")", "]", "}"):
            pass  # the closing line of a decorator's arguments (black puts it here)
        else:
            pending = None  # `@` as an operator on a continuation line, or a stray decorator
    return out


def build(text: str) -> Outline:
    """The chunks of a module. Never raises: a file it cannot model is one chunk."""
    try:
        strings = multiline_strings(text)
    except Unmodelled:
        return _whole(text)
    starts = [s for s, _ in strings]
    n = len(text)
    code_lines = _line_start_positions(text, _CODE_LINE, 0, n)
    defs = _boundaries(text, code_lines, 0, strings, starts)
    chunks: list[Chunk] = []
    first = defs[0][0] if defs else n
    if first > 0 or not defs:
        chunks.append(Chunk(0, HEAD, None, 0, first, 1, 0))
    line, at = 1, 0
    for k, (pos, keyword, kind, name) in enumerate(defs):
        end = defs[k + 1][0] if k + 1 < len(defs) else n
        line += text.count("\n", at, pos)
        at = pos
        chunk = Chunk(len(chunks), kind, name, pos, end, line, 0, keyword=keyword, span_end=end)
        chunk.extra_module = _has_extra(text, code_lines, keyword, end, 0, strings, starts)
        chunks.append(chunk)
    return Outline(text, chunks, strings)


def _has_extra(text: str, lines: list[int], keyword: int, end: int, indent: int, strings, starts) -> bool:
    """Whether a line of code at `indent` follows the definition header at `keyword` before
    `end` (closing-bracket lines of a long signature do not count)."""
    i = bisect.bisect_right(lines, keyword)
    while i < len(lines) and lines[i] < end:
        pos = lines[i]
        if not _in_string(strings, starts, pos) and text[pos + indent : pos + indent + 1] not in (")", "]", "}"):
            return True
        i += 1
    return False


def _whole(text: str) -> Outline:
    return Outline(text, [Chunk(0, HEAD, None, 0, len(text), 1, 0)], whole=True)


_CLASS_HEADER = re.compile(r"class[ \t]+\w+")


def _header_end(text: str, keyword: int, end: int) -> int | None:
    """Offset just after the `:` that ends a class header whose keyword is at `keyword`; None
    when the header holds anything but plain code (a string, a comment, a continuation)."""
    m = _CLASS_HEADER.match(text, keyword)
    if m is None:
        return None
    depth = 0
    i = m.end()
    while i < end:
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch in "'\"#\\":
            return None
        elif ch == ":" and depth == 0:
            return i + 1
        i += 1
    return None


_FIRST_BODY_LINE = re.compile(r"\n([ ]*)(?=[^ \t\n#\f\\])")


def _split_class(text: str, outline: Outline, cls: Chunk, strings, starts) -> None:
    colon = _header_end(text, cls.keyword, cls.end)
    if colon is None:
        return
    nl = text.find("\n", colon, cls.end)
    if nl < 0:
        return
    rest = text[colon:nl].strip(" \t")
    if rest and not rest.startswith("#"):
        return  # `class A: pass` on one line
    m = _FIRST_BODY_LINE.search(text, nl, cls.end)
    if m is None or not m.group(1):
        return
    indent = len(m.group(1))
    # the body ends at the first line of code back at column 0 (outside strings); module
    # code may follow it inside this chunk
    body_end = cls.end
    for dedent in _line_start_positions(text, _CODE_LINE, m.start() + 1, cls.end):
        if not _in_string(strings, starts, dedent):
            body_end = dedent
            break
    body_line = re.compile(r"\n(?=" + " " * indent + r"[^ \t\n#\f\\])")
    body_lines = _line_start_positions(text, body_line, m.start() + 1, body_end)
    defs = _boundaries(text, body_lines, indent, strings, starts)
    if not defs:
        return
    cls_end = cls.end
    cls.end = defs[0][0]  # the class head: header and body code before the first method
    cls.filler = " " * indent + "pass\n"
    module_extra, cls.extra_module = cls.extra_module, False
    line, at = cls.line, cls.start
    for k, (pos, keyword, kind, name) in enumerate(defs):
        end = defs[k + 1][0] if k + 1 < len(defs) else cls_end
        line += text.count("\n", at, pos)
        at = pos
        sub = Chunk(len(outline.chunks), kind, name, pos, end, line, indent, cls.index, keyword=keyword)
        sub.extra_class = _has_extra(text, body_lines, keyword, min(end, body_end), indent, strings, starts)
        sub.extra_module = module_extra and end == cls_end
        outline.chunks.append(sub)


# -- parsing ---------------------------------------------------------------------------------


_MAX_PAD_LINES = 2000  # blank lines always cheap enough to parse
_PAD_PER_LINE = 100  # blank lines per line of the chunk beyond which its nodes are shifted


def _shift_lines(tree: ast.AST, n: int) -> None:
    """Move every node of `tree` down `n` lines (`ast.increment_lineno`, without its checks)."""
    for node in ast.walk(tree):
        if "lineno" in node._attributes:
            node.lineno = getattr(node, "lineno", 0) + n
            end = getattr(node, "end_lineno", None)
            if end is not None:
                node.end_lineno = end + n


class ChunkSyntaxError(Exception):
    """A chunk did not parse on its own; the caller parses the whole module instead."""


def parse_chunk(text: str, chunk: Chunk, filename: str = "<lint>") -> tuple[list[ast.stmt], list[ast.stmt]]:
    """The statements of one chunk, with line numbers of the whole file: those at the chunk's
    own level (the module's, or the class body's for a method chunk), and the module code that
    follows the class in a class's last method chunk."""
    src = text[chunk.start : chunk.end] + chunk.filler
    wrapped = chunk.parent is not None
    # blank lines in front give the parser the file's line numbers: cheaper than shifting
    # every node afterwards (a blank line costs the tokenizer about a hundredth of what a
    # line of code costs to shift), unless they far outnumber the chunk's own lines; then,
    # parsing each of many small chunks of a long file would be quadratic in its length. A
    # method chunk sits in an `if 1:` at the class body's level.
    pad = chunk.line - 1 - (1 if wrapped else 0)
    shift = 0
    if pad > _MAX_PAD_LINES and pad > _PAD_PER_LINE * (text.count("\n", chunk.start, chunk.end) + 1):
        shift = pad
    if wrapped:
        src = "if 1:\n" + src
    src = "\n" * (pad - shift) + src
    try:
        tree = compile(src, filename, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise ChunkSyntaxError(str(exc)) from None
    if shift:
        _shift_lines(tree, shift)
    if wrapped:
        return list(tree.body[0].body), list(tree.body[1:])
    return list(tree.body), []
