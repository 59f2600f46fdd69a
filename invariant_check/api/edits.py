"""Building a fix's edits from the syntax tree a rule already has (stdlib only).

Positions come from `ast` (UTF-8 byte columns) and are turned into the 1-based character
columns that findings and `Edit`s use. Every helper refuses (returns None) rather than guess:
a statement that shares its line with another, code on a line with a backslash continuation,
a block written on its header's line. `--fix` then checks the edits again with libcst, compiles
the result and lints it once more (`invariant_check.fixing.fixes`).
"""

from __future__ import annotations

import ast
import difflib
import re
import textwrap
from bisect import bisect_right
from functools import lru_cache
from typing import Iterable

from ..analysis.source import Source
from .layout import style_for
from .types import SAFE, Edit, Fix

_BLANK = re.compile(r"[ \t\f]*$")


class Editor:
    """Edits of one decoded module (`Source`, with `\\n` line endings)."""

    def __init__(self, source: Source) -> None:
        self.source = source

    # -- positions ---------------------------------------------------------------------------
    def start(self, node: ast.AST) -> tuple[int, int]:
        return node.lineno, self.source.column(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> tuple[int, int]:
        line = node.end_lineno or node.lineno
        return line, self.source.column(line, node.end_col_offset if node.end_col_offset is not None else node.col_offset)

    def line(self, n: int) -> str:
        return self.source.line_text(n)

    @property
    def line_count(self) -> int:
        return len(self.source.line_starts)

    def text_between(self, start: tuple[int, int], end: tuple[int, int]) -> str:
        starts = self.source.line_starts
        a = starts[start[0] - 1] + start[1] - 1
        b = starts[end[0] - 1] + end[1] - 1
        return self.source.text[a:b]

    def node_text(self, node: ast.AST) -> str:
        """The exact source of a node (lines as written, not collapsed)."""
        return self.text_between(self.start(node), self.end(node))

    # -- statements ----------------------------------------------------------------------------
    def indent_of(self, stmt: ast.stmt) -> str | None:
        """The indentation of a statement that starts its line; None when something else
        precedes it there (`if x: stmt`, `a; stmt`)."""
        text = self.line(stmt.lineno)
        _, col = self.start(stmt)
        head = text[: col - 1]
        return head if _BLANK.match(head) else None

    def ends_its_line(self, stmt: ast.stmt) -> bool:
        """Whether only a comment (or nothing) follows the statement on its last line."""
        line, col = self.end(stmt)
        rest = self.line(line)[col - 1 :].strip()
        return not rest or rest.startswith("#")

    def insert_after(self, stmt: ast.stmt, code: str, indent: str | None = None, blank_before: bool = False) -> Edit | None:
        """New lines right after a statement, at its indentation (or `indent`), after one
        blank line if `blank_before`."""
        if indent is None:
            indent = self.indent_of(stmt)
        if indent is None or not self.ends_its_line(stmt):
            return None
        last = stmt.end_lineno or stmt.lineno
        if self._continued(last):
            return None
        body = ("\n" if blank_before else "") + _indented(code, indent)
        if last >= self.line_count:
            # the last line of the file, without a newline: it stays without one
            end = (last, len(self.line(last)) + 1)
            return Edit(end[0], end[1], end[0], end[1], "\n" + body.rstrip("\n"))
        return Edit(last + 1, 1, last + 1, 1, body)

    def insert_before(self, stmt: ast.stmt, code: str, blank_after: bool = False) -> Edit | None:
        """New lines right before a statement that starts its line, at its indentation
        (then a blank line if `blank_after`)."""
        indent = self.indent_of(stmt)
        if indent is None:
            return None
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
        if first > 1 and self._continued(first - 1):
            return None
        return Edit(first, 1, first, 1, _indented(code, indent) + ("\n" if blank_after else ""))

    def replace(self, node: ast.AST, text: str) -> Edit:
        (l1, c1), (l2, c2) = self.start(node), self.end(node)
        return Edit(l1, c1, l2, c2, text)

    def _continued(self, line: int) -> bool:
        return self.line(line).rstrip().endswith("\\")


def parents_of(root: ast.AST) -> dict[int, ast.AST]:
    """id(node) -> its parent, for every node under `root`."""
    out: dict[int, ast.AST] = {}
    for node in ast.walk(root):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def statement_holding(root: ast.AST, node: ast.AST) -> ast.stmt | None:
    """The innermost statement under `root` that holds `node` (the node itself if it is one)."""
    parents = parents_of(root)
    cur: ast.AST | None = node
    while cur is not None and not isinstance(cur, ast.stmt):
        cur = parents.get(id(cur))
    return cur


def block_of(root: ast.AST, stmt: ast.stmt) -> tuple[list[ast.stmt], int] | None:
    """The statement list holding `stmt`, and its index there."""
    for node in ast.walk(root):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list):
                for i, s in enumerate(block):
                    if s is stmt:
                        return block, i
        for handler in getattr(node, "handlers", []) or []:
            for i, s in enumerate(handler.body):
                if s is stmt:
                    return handler.body, i
    return None


@lru_cache(maxsize=4)
def _parsed(text: str) -> ast.Module:
    return ast.parse(text)


def parses_whole(text: str) -> bool:
    """Whether the whole file parses (a null byte, a syntax error in a definition no rule
    read: the engine itself never needs the whole file)."""
    try:
        _parsed(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


@lru_cache(maxsize=4)
def _top_starts(text: str) -> tuple[list[int], list[ast.stmt]]:
    body = _parsed(text).body
    # a definition starts at its first decorator
    return [min([st.lineno, *(d.lineno for d in getattr(st, "decorator_list", ()))]) for st in body], body


def whole(source: Source, node: ast.AST) -> ast.AST:
    """`node` as a parse of the whole file has it. The engine parses only the definitions a
    rule needs: a class's methods may be outlines there, with bodies left out. Only the
    top-level statement holding the node is walked (a long file has many)."""
    starts, body = _top_starts(source.text)
    i = bisect_right(starts, node.lineno) - 1
    if i < 0:
        return node
    for sub in ast.walk(body[i]):
        if type(sub) is type(node) and getattr(sub, "lineno", None) == node.lineno and sub.col_offset == node.col_offset:
            return sub
    return node


def add_keywords(ed: Editor, call: ast.Call, new: list[str]) -> Edit | None:
    """`new` keywords (`name=value`) after the call's last argument, in the call's layout."""
    items = [(ed.start(a), _end_of_argument(ed, a)) for a in list(call.args) + list(call.keywords)]
    close = ed.end(call)
    return append_items(ed, call.lineno, items, (close[0], close[1] - 1), new)


def one_per_line(ed: Editor, call: ast.Call) -> bool:
    """Whether a call writes its arguments on lines of their own."""
    args = list(call.args) + list(call.keywords)
    if not args:
        return False
    last = max(_end_of_argument(ed, a) for a in args)
    return min(a.lineno for a in args) > call.lineno and (call.end_lineno or call.lineno) > last[0]


def add_parameter(ed: Editor, func: ast.AST, text: str) -> Edit | None:
    """A parameter (`name=default`) added to a `def` after its last one (before `**kwargs`)."""
    args = func.args
    if args.kwarg is not None:
        line, col = ed.start(args.kwarg)
        if ed.line(line)[col - 3 : col - 1] != "**":
            return None
        return Edit(line, col - 2, line, col - 2, f"{text}, ")
    params = args.posonlyargs + args.args + ([args.vararg] if args.vararg else []) + args.kwonlyargs
    if not params:
        return None
    defaults = dict(zip([id(a) for a in (args.posonlyargs + args.args)[-len(args.defaults):]], args.defaults)) if args.defaults else {}
    defaults.update({id(a): d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    items = []
    for a in params:
        end = ed.end(defaults[id(a)]) if id(a) in defaults else ed.end(a)
        start = ed.start(a)
        if a is args.vararg:
            start = (start[0], start[1] - 1)  # the `*`
        items.append((start, end))
    close = _closing_paren(ed, items[-1][1])
    if close is None:
        return None
    return append_items(ed, func.lineno, items, close, [text])


def add_import_from(ed: Editor, module: str, name: str) -> Edit | None:
    """`from module import name` among the file's top-level imports, where isort (ruff's
    `I`) puts it: into an existing one-line `from module import ...`, or as a line of its own
    in the block of the standard library's imports, sorted by module. None when the file has
    no such block to join (a new block would need its own blank lines)."""
    import sys

    tree = _parsed(ed.source.text)
    imports = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            imports.append(stmt)
        elif imports and not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            break
    stdlib = getattr(sys, "stdlib_module_names", frozenset())

    def top(stmt) -> str:
        mod = stmt.module if isinstance(stmt, ast.ImportFrom) else stmt.names[0].name
        return (mod or "").split(".")[0]

    for stmt in imports:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == module and not stmt.level:
            if stmt.lineno != stmt.end_lineno or any(a.asname for a in stmt.names):
                return None
            names = sorted({a.name for a in stmt.names} | {name}, key=lambda n: (not n.isupper(), n[:1].islower(), n))
            return ed.replace(stmt, f"from {module} import {', '.join(names)}")
    std = [s for s in imports if top(s) in stdlib and not getattr(s, "level", 0) and s.lineno == s.end_lineno]
    froms = [s for s in std if isinstance(s, ast.ImportFrom)]
    if not std:
        return None
    after = [s for s in froms if (s.module or "") > module]
    if after:
        return ed.insert_before(after[0], f"from {module} import {name}")
    return ed.insert_after((froms or std)[-1], f"from {module} import {name}")


def _end_of_argument(ed: Editor, node: ast.AST) -> tuple[int, int]:
    if isinstance(node, ast.keyword) and node.arg is None:  # `**kw`: the node starts after the `**`
        return ed.end(node.value)
    return ed.end(node)


def _closing_paren(ed: Editor, after: tuple[int, int]) -> tuple[int, int] | None:
    """The `)` that closes a parameter list, after its last parameter (comments skipped)."""
    line, col = after
    while line <= ed.line_count:
        text = ed.line(line)
        i = col - 1
        while i < len(text):
            ch = text[i]
            if ch == "#":
                break
            if ch == ")":
                return (line, i + 1)
            if ch not in " \t,\\":
                return None
            i += 1
        line, col = line + 1, 1
    return None


def append_items(ed: Editor, open_line: int, items: list[tuple[tuple[int, int], tuple[int, int]]], close: tuple[int, int], new: list[str]) -> Edit | None:
    """New items of a bracketed list (arguments, parameters) after its last one: one per line
    when the list is written so, else inline. `close` is the position of the closing bracket."""
    if not items:
        return None
    end = items[-1][1]
    last_line = ed.line(items[-1][0][0])
    item_indent = last_line[: len(last_line) - len(last_line.lstrip())]
    between = ed.text_between(end, close)
    comma = between.lstrip(" \t").startswith(",")
    one_per_line = items[0][0][0] > open_line and close[0] > end[0]
    if one_per_line:
        indent = item_indent
        width = style_for(ed.source.path).line_length
        new = [_laid_out(item, indent, width) for item in new]
        rest_of_line = between.split("\n", 1)[0].strip()
        if comma and (rest_of_line == "," or rest_of_line.startswith(",") and rest_of_line[1:].strip().startswith("#")):
            return Edit(end[0] + 1, 1, end[0] + 1, 1, "".join(f"{indent}{item},\n" for item in new))
        if not comma and (not rest_of_line or rest_of_line.startswith("#")):
            if rest_of_line:  # a comment after the last item: the new ones go before it
                return None
            return Edit(end[0], end[1], end[0], end[1], "".join(f",\n{indent}{item}" for item in new))
        return None
    if any("\n" in item and "#" in item for item in new):
        return None  # a comment cannot be joined onto one line
    new = [collapse(item) for item in new]
    if comma:
        at = between.index(",") + 1
        if "\n" in between[:at]:
            return None
        return Edit(end[0], end[1] + at, end[0], end[1] + at, "".join(f" {item}," for item in new))
    return Edit(end[0], end[1], end[0], end[1], "".join(f", {item}" for item in new))


WIDTH = 88  # the line length vLLM formats with


def collapse(code: str) -> str:
    """Code written over several lines, on one: `f(\n    a,\n)` -> `f(a)`."""
    text = " ".join(code.split())
    text = re.sub(r"([(\[{])\s+", r"\1", text)
    return re.sub(r",?\s+([)\]}])", r"\1", text)


def _laid_out(item: str, indent: str, width: int = WIDTH) -> str:
    """An item on its own line(s): on one line where it fits (without the parentheses of a
    `name=(...)` value, as ruff format writes it), else as written (its later lines indented
    from the item's)."""
    flat = collapse(item)
    if "\n" not in item:
        return flat
    if "#" not in item:
        m = re.fullmatch(r"(\w+=)\((.*)\)", flat)
        if m and _balanced(m.group(2)) and len(indent) + len(m.group(1) + m.group(2)) + 1 <= width:
            return m.group(1) + m.group(2)
        if len(indent) + len(flat) + 1 <= width:
            return flat
    return item.replace("\n", "\n" + indent)


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth < 0:
            return False
    return depth == 0


def wrapped_call(prefix: str, func: str, args: list[str], indent: str) -> str:
    """`prefix func(args)` on one line where it fits, else with the arguments on their own
    line (as black and ruff format it). Lines relative to `indent`, which is not included."""
    one = f"{prefix}{func}({', '.join(args)})"
    if len(indent) + len(one) <= WIDTH:
        return one
    return f"{prefix}{func}(\n    {', '.join(args)}\n)"


def _indented(code: str, indent: str) -> str:
    lines = textwrap.dedent(code).strip("\n").split("\n")
    return "".join((indent + l if l.strip() else "") + "\n" for l in lines)


def reindent(code: str, indent: str) -> str:
    """`code` (dedented first) with every non-blank line at `indent`, ending in a newline."""
    return _indented(code, indent)


def fresh_name(node: ast.AST, preferred: Iterable[str]) -> str:
    """The first of `preferred` that no name or attribute in `node` uses."""
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    used |= {a.arg for a in ast.walk(node) if isinstance(a, ast.arg)}
    names = list(preferred)
    for name in names:
        if name not in used:
            return name
    base, i = names[0], 2
    while f"{base}{i}" in used:
        i += 1
    return f"{base}{i}"


# -- applying edits to text (hints, tests, `--fix`) -----------------------------------------------


def line_starts(text: str) -> list[int]:
    starts = [0]
    for m in re.finditer(r"\r\n|\r|\n", text):
        starts.append(m.end())
    return starts


def apply_to_text(text: str, edits: Iterable[Edit], newline: str = "\n") -> str:
    """`text` with the edits made (they must not overlap). Positions count lines as Python
    does (`\\r\\n`, `\\r` and `\\n` end a line); inserted text takes `newline`."""
    starts = line_starts(text)

    def offset(line: int, column: int) -> int:
        if line > len(starts):
            return len(text)
        base = starts[line - 1]
        return min(base + column - 1, len(text))

    out = text
    for e in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        a, b = offset(e.line, e.column), offset(e.end_line, e.end_column)
        if b < a:
            raise ValueError(f"edit ends before it starts: {e}")
        content = e.content if newline == "\n" else e.content.replace("\n", newline)
        out = out[:a] + content + out[b:]
    return out


def overlapping(a: Edit, b: Edit) -> bool:
    """Whether two edits touch the same text (two insertions at one point count: their order
    would be a guess)."""
    if a.start == a.end and b.start == b.end:
        return a.start == b.start
    if a.start == a.end:
        return b.start < a.start < b.end
    if b.start == b.end:
        return a.start < b.start < a.end
    return a.start < b.end and b.start < a.end


def fixes_overlap(a: Fix, b: Fix) -> bool:
    return any(overlapping(x, y) for x in a.edits for y in b.edits)


# -- the hint rendered from a fix -------------------------------------------------------------------


def render_hint(fix: Fix, source: Source) -> str:
    """The hint a finding shows: what the fix does, then the lines it changes as a diff
    (`-` removed, `+` added), rendered from the fix itself so that the two cannot disagree."""
    how = "safe fix: `--fix`" if fix.applicability == SAFE else "unsafe fix: `--fix --unsafe-fixes`"
    return f"{fix.message} ({how}):\n" + "\n".join(diff_lines(fix, source))


@lru_cache(maxsize=4)
def _split(text: str) -> list[str]:
    # once per file, not once per finding (a file with many findings)
    return text.split("\n")


def diff_lines(fix: Fix, source: Source) -> list[str]:
    lines = _split(source.text)
    first = min(e.line for e in fix.edits)
    last = max(e.end_line for e in fix.edits)
    # whole lines around the edits, before and after
    region_end = min(last, len(lines))
    before = lines[first - 1 : region_end]
    local = [
        Edit(e.line - first + 1, e.column, e.end_line - first + 1, e.end_column, e.content) for e in fix.edits
    ]
    after = apply_to_text("\n".join(before), local).split("\n")
    # an added statement too long for the project is shown as its formatter would write it
    from .linewrap import line_length_of, wrap_statements

    shown_after = wrap_statements(after, line_length_of(source.path))
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        out.extend("- " + l for l in before[i1:i2])
        out.extend("+ " + w for l in range(j1, j2) for w in shown_after[l])
    while out and not out[0][2:].strip():
        out.pop(0)
    while out and not out[-1][2:].strip():
        out.pop()
    if not out:
        return ["(no change)"]
    # drop the indentation every shown line shares
    body = [l[2:] for l in out if l[2:].strip()]
    margin = min((len(l) - len(l.lstrip()) for l in body), default=0)
    return [l[:2] + l[2 + margin :] if l[2:].strip() else l[:1] for l in out]
