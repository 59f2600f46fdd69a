"""A fix laid out as the linted project's formatter lays out code (stdlib only).

The project's settings are read from its own configuration, as ruff and black find it: the
nearest `.ruff.toml`, `ruff.toml`, or `pyproject.toml` with a `[tool.ruff]` or `[tool.black]`
table, from the fixed file's folder up (`line-length`, default 88; ruff's
`format.quote-style`). Every statement a fix writes or changes is then written as `ruff
format` (and black) would write it, without calling either:

- on one line where it fits;
- else split at its last bracket (a call's arguments on the next line, then one per line
  with a trailing comma when they do not fit there either), a right-hand side without a
  bracket of its own in parentheses split at its lowest-priority operator, a trailing comma
  already written (a "magic" one) keeping its brackets split;
- comment lines longer than the line wrapped.

A statement holding a comment or a string over several lines is left as the fix wrote it.
"""

from __future__ import annotations

import ast
import difflib
import io
import os
import re
import textwrap
import tokenize
from dataclasses import dataclass
from functools import lru_cache

try:  # Python 3.11+
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

UNIT = "    "


@dataclass(frozen=True)
class Style:
    line_length: int = 88
    quote: str = '"'  # '"', "'" or "" (keep what is written)
    config: str | None = None  # the file the settings came from


DEFAULT = Style()


def style_for(path: str | None) -> Style:
    """The formatter settings of the project holding `path` (a file)."""
    if not path or path.startswith("<"):
        return DEFAULT
    return _style_of_folder(os.path.dirname(os.path.abspath(path)))


@lru_cache(maxsize=256)
def _style_of_folder(folder: str) -> Style:
    for name in (".ruff.toml", "ruff.toml", "pyproject.toml"):
        candidate = os.path.join(folder, name)
        if not os.path.isfile(candidate):
            continue
        try:
            with open(candidate, "rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        if name == "pyproject.toml":
            tool = data.get("tool") or {}
            if isinstance(tool.get("ruff"), dict):
                return _ruff_style(tool["ruff"], candidate)
            if isinstance(tool.get("black"), dict):
                black = tool["black"]
                return Style(
                    _length(black.get("line-length")),
                    "" if black.get("skip-string-normalization") else '"',
                    candidate,
                )
            continue
        return _ruff_style(data, candidate)
    parent = os.path.dirname(folder)
    return DEFAULT if parent == folder else _style_of_folder(parent)


def _ruff_style(table: dict, where: str) -> Style:
    fmt = table.get("format") if isinstance(table.get("format"), dict) else {}
    quote = {"single": "'", "double": '"', "preserve": ""}.get(fmt.get("quote-style", "double"), '"')
    return Style(_length(table.get("line-length")), quote, where)


def _length(value) -> int:
    return value if isinstance(value, int) and 1 <= value <= 320 else 88


# -- laying out the statements a fix touches --------------------------------------------------------


def restyle(old: str, new: str, style: Style) -> str:
    """`new` (`old` with a fix's edits made) with every statement on a line the fix changed
    written in the project's style. Returns `new` itself when it cannot tell."""
    a, b = old.split("\n"), new.split("\n")
    changed: set[int] = set()  # 1-based lines of `new`
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            changed.update(range(j1 + 1, j2 + 1))
    if not changed:
        return new
    try:
        tree = ast.parse(new)
    except (SyntaxError, ValueError):
        return new
    fmt = _Formatter(new, style)
    spans: list[tuple[int, int, list[str]]] = []
    for stmt, first, last in _touched(tree, changed):
        lines = fmt.statement(stmt, first, last)
        if lines is not None and lines != b[first - 1 : last]:
            spans.append((first, last, lines))
    for n in sorted(changed):
        text = b[n - 1]
        if text.lstrip().startswith("#") and len(text) > style.line_length and not any(f <= n <= l for f, l, _ in spans):
            spans.append((n, n, _wrapped_comment(text, style.line_length)))
    out = list(b)
    for first, last, lines in sorted(spans, reverse=True):
        out[first - 1 : last] = lines
    return "\n".join(out)


def _touched(tree: ast.AST, changed: set[int]):
    """(statement, first line, last line) of each simple statement and compound header that
    has a changed line; a header ends where its body starts."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        body = getattr(node, "body", None)
        if isinstance(body, list) and body:
            if isinstance(node, (ast.Try, ast.With, ast.AsyncWith, ast.ClassDef)) or getattr(node, "decorator_list", None):
                continue  # headers left as written
            last = body[0].lineno - 1
            if last < node.lineno:
                continue  # a body on the header's line
        else:
            last = node.end_lineno or node.lineno
        if any(first <= n <= last for n in changed):
            out.append((node, first, last))
    return out


def _wrapped_comment(text: str, width: int) -> list[str]:
    indent = text[: len(text) - len(text.lstrip())]
    body = text.lstrip()[1:].strip()
    room = max(width - len(indent) - 2, 20)
    return [f"{indent}# {part}" for part in textwrap.wrap(body, room, break_long_words=False, break_on_hyphens=False)] or [text]


# -- the formatter ------------------------------------------------------------------------------------

_CLOSE = {"(": ")", "[": "]", "{": "}"}
_BINOPS = {
    ast.BitOr: (9, "|"), ast.BitXor: (8, "^"), ast.BitAnd: (7, "&"), ast.LShift: (6, "<<"), ast.RShift: (6, ">>"),
    ast.Add: (5, "+"), ast.Sub: (5, "-"), ast.Mult: (4, "*"), ast.Div: (4, "/"), ast.FloorDiv: (4, "//"),
    ast.Mod: (4, "%"), ast.MatMult: (4, "@"), ast.Pow: (1, "**"),
}
_CMPOPS = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
}


class _CannotFormat(Exception):
    pass


class _Formatter:
    def __init__(self, text: str, style: Style) -> None:
        self.text = text
        self.lines = text.split("\n")
        self.width = style.line_length
        self.quote = style.quote
        self._starts = [0]
        for line in self.lines[:-1]:
            self._starts.append(self._starts[-1] + len(line) + 1)

    # -- text of nodes --------------------------------------------------------------------------
    def _offset(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1]
        col = byte_col if text.isascii() else len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))
        return self._starts[line - 1] + col

    def seg(self, node: ast.AST) -> str:
        return self.text[self._offset(node.lineno, node.col_offset) : self._offset(node.end_lineno, node.end_col_offset)]

    def flat(self, node: ast.AST) -> str:
        """The node on one line; `_CannotFormat` where it must stay split (a magic trailing
        comma) or cannot be joined (a comment, a string over lines)."""
        text = self.seg(node)
        if self._magic_inside(node):
            raise _CannotFormat
        if "\n" in text:
            if "#" in text or any(isinstance(n, (ast.Constant, ast.JoinedStr)) and "\n" in self.seg(n) for n in ast.walk(node) if hasattr(n, "lineno")):
                raise _CannotFormat
            text = " ".join(text.split())
            text = re.sub(r"([(\[{]) ", r"\1", text)
            text = re.sub(r",? ([)\]}])", r"\1", text)
        return self._quoted(node, text)

    def _quoted(self, node: ast.AST, text: str) -> str:
        if self.quote != "'" and self.quote != '"':
            return text
        other = "'" if self.quote == '"' else '"'
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                s = self.seg(n)
                if len(s) >= 2 and s[0] == other and s[-1] == other and self.quote not in s and "\\" not in s and not s.startswith(other * 3):
                    text = text.replace(s, self.quote + s[1:-1] + self.quote)
        return text

    def _magic_inside(self, node: ast.AST) -> bool:
        return any(self._magic(n) for n in ast.walk(node))

    def _magic(self, node: ast.AST) -> bool:
        """A trailing comma after a bracket's last item: the formatter keeps it split."""
        items = self._items_of(node)
        if not items:
            return False
        if isinstance(node, ast.Tuple) and len(items) == 1:
            return False
        end = self._offset(node.end_lineno, node.end_col_offset)
        last = max(self._offset(n.end_lineno, n.end_col_offset) for n in items)
        between = self.text[last : end - 1]
        return between.split("#", 1)[0].strip().startswith(",")

    def _items_of(self, node: ast.AST) -> list[ast.AST]:
        if isinstance(node, ast.Call):
            if self._bare_generator(node):
                return []
            return list(node.args) + [k.value for k in node.keywords]
        if isinstance(node, (ast.List, ast.Set)):
            return list(node.elts)
        if isinstance(node, ast.Tuple) and self.seg(node).startswith("("):
            return list(node.elts)
        if isinstance(node, ast.Dict):
            return [v for v in node.values]
        return []

    def _bare_generator(self, call: ast.Call) -> bool:
        """`f(x for x in y)`: the generator's parentheses are the call's."""
        if len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.GeneratorExp):
            return False
        gen = call.args[0]
        return (gen.end_lineno, gen.end_col_offset) == (call.end_lineno, call.end_col_offset)

    def fits(self, line: str) -> bool:
        return len(line) <= self.width

    # -- statements -----------------------------------------------------------------------------------
    def statement(self, stmt: ast.stmt, first: int, last: int) -> list[str] | None:
        region = "\n".join(self.lines[first - 1 : last])
        trailing = _trailing_comment(self.lines[last - 1])
        if trailing:
            region = "\n".join(self.lines[first - 1 : last - 1] + [self.lines[last - 1][: -len(trailing)]])
        if _has_comment(region) or any(
            isinstance(n, (ast.Constant, ast.JoinedStr)) and hasattr(n, "lineno") and "\n" in self.seg(n) for n in ast.walk(stmt) if n is stmt or not isinstance(n, ast.stmt)
        ):
            return None
        head = self.lines[stmt.lineno - 1]
        indent = head[: len(head) - len(head.lstrip())]
        try:
            lines = self._statement(stmt)
        except (_CannotFormat, RecursionError):
            return None
        if lines is None:
            return None
        if trailing:
            if len(lines) == 1 and not self.fits(indent + lines[0] + "  " + trailing):
                return None  # the comment alone is too long: as written
            lines[-1] += "  " + trailing
        return [indent + l if l else l for l in lines]

    def _statement(self, stmt: ast.stmt) -> list[str] | None:
        self.base = len(self.lines[stmt.lineno - 1]) - len(self.lines[stmt.lineno - 1].lstrip())
        if isinstance(stmt, ast.Expr):
            return self.emit("", stmt.value, "", 0, parens=False)
        if isinstance(stmt, ast.Assign):
            prefix = "".join(self.flat(t) + " = " for t in stmt.targets)
            return self.emit(prefix, stmt.value, "", 0)
        if isinstance(stmt, ast.AugAssign):
            return self.emit(f"{self.flat(stmt.target)} {_BINOPS[type(stmt.op)][1]}= ", stmt.value, "", 0)
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            return self.emit(f"{self.flat(stmt.target)}: {self.flat(stmt.annotation)} = ", stmt.value, "", 0)
        if isinstance(stmt, ast.Return):
            return ["return"] if stmt.value is None else self.emit("return ", stmt.value, "", 0)
        if isinstance(stmt, (ast.If, ast.While)):
            return self.emit("if " if isinstance(stmt, ast.If) and not self._is_elif(stmt) else ("elif " if isinstance(stmt, ast.If) else "while "), stmt.test, ":", 0)
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            kw = "async for " if isinstance(stmt, ast.AsyncFor) else "for "
            return self.emit(f"{kw}{self.flat(stmt.target)} in ", stmt.iter, ":", 0)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return self._def(stmt)
        if isinstance(stmt, (ast.Pass, ast.Break, ast.Continue)):
            return [self.seg(stmt)]
        return None

    def _is_elif(self, stmt: ast.If) -> bool:
        return self.lines[stmt.lineno - 1].lstrip().startswith("elif")

    def _def(self, fn) -> list[str] | None:
        a = fn.args
        params = a.posonlyargs + a.args + ([a.vararg] if a.vararg else []) + a.kwonlyargs + ([a.kwarg] if a.kwarg else [])
        if a.posonlyargs or (a.kwonlyargs and not a.vararg):
            return None  # `/` and a bare `*`: written as they are
        defaults = dict(zip([id(p) for p in (a.posonlyargs + a.args)[len(a.posonlyargs + a.args) - len(a.defaults):]], a.defaults))
        defaults.update({id(p): d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
        items = []
        for p in params:
            star = "*" if p is a.vararg else "**" if p is a.kwarg else ""
            text = star + p.arg + (": " + self.flat(p.annotation) if p.annotation is not None else "")
            if id(p) in defaults:
                text += (" = " if p.annotation is not None else "=") + self.flat(defaults[id(p)])
            items.append(text)
        kw = "async def " if isinstance(fn, ast.AsyncFunctionDef) else "def "
        ret = f" -> {self.flat(fn.returns)}" if fn.returns is not None else ""
        head = f"{kw}{fn.name}("
        close = f"){ret}:"
        end = fn.body[0]
        header = "\n".join(self.lines[fn.lineno - 1 : end.lineno - 1]) if end.lineno > fn.lineno else ""
        magic = bool(params) and re.search(r",\s*\)\s*(->[^:]*)?:\s*$", header) is not None
        one = head + ", ".join(items) + close
        if not magic and self.fits(" " * self.base + one):
            return [one]
        joined = ", ".join(items)
        if not magic and self.fits(" " * self.base + UNIT + joined):
            return [head, UNIT + joined, close]
        return [head] + [UNIT + i + "," for i in items] + [close]

    # -- expressions --------------------------------------------------------------------------------
    def emit(self, prefix: str, node: ast.AST, suffix: str, depth: int, parens: bool = True) -> list[str]:
        ind = UNIT * depth
        try:
            one = prefix + self.flat(node) + suffix
            if self.fits(" " * self.base + ind + one):
                return [ind + one]
        except _CannotFormat:
            if not self._magic_inside(node):
                raise
        split = self._bracket_split(prefix, node, suffix, depth)
        if split is not None:
            return split
        ops = self._operands(node)
        if ops is not None and parens:
            try:  # in parentheses on a line of its own where it fits there
                body = ind + UNIT + self.flat(node)
                if self.fits(" " * self.base + body):
                    return [ind + prefix + "(", body, ind + ")" + suffix]
            except _CannotFormat:
                pass
            inner: list[str] = []
            for lead, sub in ops:
                inner += self.emit(lead, sub, "", depth + 1, parens=True)
            return [ind + prefix + "("] + inner + [ind + ")" + suffix]
        return [ind + prefix + self.flat(node) + suffix]

    def _trailer(self, node: ast.AST) -> ast.AST | None:
        """The bracketed node the expression's text ends with, reached through the last
        operand of operators (a call, a subscript, a display)."""
        cur = node
        while True:
            if self._split_parts(cur) is not None:
                return cur
            if isinstance(cur, ast.BoolOp):
                cur = cur.values[-1]
            elif isinstance(cur, ast.BinOp):
                cur = cur.right
            elif isinstance(cur, ast.Compare):
                cur = cur.comparators[-1]
            elif isinstance(cur, ast.UnaryOp):
                cur = cur.operand
            elif isinstance(cur, ast.Lambda):
                cur = cur.body
            else:
                return None

    def _split_parts(self, node: ast.AST):
        """(text before the bracket, bracket, [(lead, item)], kind) of a bracketed node."""
        if isinstance(node, ast.Call):
            try:
                func = self.flat(node.func)
            except _CannotFormat:
                return None
            if self._bare_generator(node):
                return func, "(", self._comprehension(node.args[0]), "comp"
            items = sorted(
                [(("*" if isinstance(a, ast.Starred) else ""), (a.value if isinstance(a, ast.Starred) else a)) for a in node.args]
                + [((f"{k.arg}=" if k.arg else "**"), k.value) for k in node.keywords],
                key=lambda it: (it[1].lineno, it[1].col_offset),
            )
            return func, "(", items, "comma" if items else None
        if isinstance(node, ast.Subscript):
            try:
                value = self.flat(node.value)
            except _CannotFormat:
                return None
            return value, "[", [("", node.slice)], "one"
        if isinstance(node, (ast.List, ast.Set)) or (isinstance(node, ast.Tuple) and self.seg(node).startswith("(")):
            bracket = {ast.List: "[", ast.Set: "{", ast.Tuple: "("}[type(node)]
            return "", bracket, [("", e) for e in node.elts], "comma" if node.elts else None
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)) and self.seg(node)[:1] in "([{":
            return "", self.seg(node)[0], self._comprehension(node), "comp"
        return None

    def _comprehension(self, node) -> list[tuple[str, ast.AST]]:
        parts: list[tuple[str, ast.AST]] = [("", node.elt)]
        for gen in node.generators:
            parts.append((f"{'async ' if gen.is_async else ''}for {self.flat(gen.target)} in ", gen.iter))
            parts += [("if ", cond) for cond in gen.ifs]
        return parts

    def _bracket_split(self, prefix: str, node: ast.AST, suffix: str, depth: int) -> list[str] | None:
        ind = UNIT * depth
        trailer = self._trailer(node)
        if trailer is None:
            return None
        if trailer is not node:
            # an operator chain ending in a bracket: split there only when the chain has one
            # operator of its lowest priority and what comes before the bracket fits
            if self._top_delimiters(node) != 1 and not (isinstance(node, ast.Lambda) and self._split_parts(node.body)):
                return None
            whole, tail = self.flat(node), self.flat(trailer)
            if not whole.endswith(tail):
                return None
            before = whole[: len(whole) - len(tail)]
        else:
            before = ""
        parts = self._split_parts(trailer)
        if parts is None or parts[3] is None:
            return None
        head_text, bracket, items, kind = parts
        head = ind + prefix + before + head_text + bracket
        if trailer is not node and not self.fits(" " * self.base + head):
            return None
        body = self._body(items, kind, depth + 1, magic=self._magic(trailer))
        return [head] + body + [ind + _CLOSE[bracket] + suffix]

    def _body(self, items, kind: str, depth: int, magic: bool) -> list[str]:
        ind = UNIT * depth
        if kind == "comp":
            try:
                one = " ".join(lead + self.flat(n) for lead, n in items)
                if self.fits(" " * self.base + ind + one):
                    return [ind + one]
            except _CannotFormat:
                pass
            out: list[str] = []
            for lead, n in items:
                out += self.emit(lead, n, "", depth)
            return out
        if kind == "one":
            return self.emit("", items[0][1], "", depth) if not isinstance(items[0][1], ast.Slice) else [ind + self.seg(items[0][1])]
        if not magic:
            try:
                one = ", ".join(lead + self.flat(n) for lead, n in items)
                if self.fits(" " * self.base + ind + one):
                    return [ind + one]
            except _CannotFormat:
                pass
            if len(items) == 1:
                lead, n = items[0]
                return self.emit(lead, n, "", depth)
        out = []
        for lead, n in items:
            out += self.emit(lead, n, ",", depth)
        return out

    def _operands(self, node: ast.AST) -> list[tuple[str, ast.AST]] | None:
        if isinstance(node, ast.IfExp):
            return [("", node.body), ("if ", node.test), ("else ", node.orelse)]
        if isinstance(node, ast.BoolOp):
            word = "and " if isinstance(node.op, ast.And) else "or "
            out = []
            for i, v in enumerate(node.values):
                if isinstance(v, ast.BoolOp) and type(v.op) is type(node.op) and not self.seg(v).startswith("("):
                    sub = self._operands(v) or [("", v)]
                    out += [((word if i else "") + lead if j == 0 else lead, n) for j, (lead, n) in enumerate(sub)]
                else:
                    out.append((word if i else "", v))
            return out
        if isinstance(node, ast.Compare):
            return [("", node.left)] + [(f"{_CMPOPS[type(op)]} ", c) for op, c in zip(node.ops, node.comparators)]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            prio, sym = _BINOPS[type(node.op)]
            left = node.left
            if isinstance(left, ast.BinOp) and type(left.op) in _BINOPS and _BINOPS[type(left.op)][0] == prio and self._bare(left):
                ops = self._operands(left) or [("", left)]
            else:
                ops = [("", left)]
            return ops + [(f"{sym} ", node.right)]
        return None

    def _bare(self, node: ast.AST) -> bool:
        return not self.seg(node).startswith("(")

    def _top_delimiters(self, node: ast.AST) -> int:
        ops = self._operands(node)
        return 0 if ops is None else len(ops) - 1


def _trailing_comment(line: str) -> str:
    """The comment that ends a line of code (`x = f()  # why`), or ""."""
    if "#" not in line:
        return ""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(line.lstrip() + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return ""
    comments = [t for t in toks if t.type == tokenize.COMMENT]
    code = [t for t in toks if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)]
    if len(comments) != 1 or not code:
        return ""
    return comments[0].string


trailing_comment = _trailing_comment


def _has_comment(text: str) -> bool:
    if "#" not in text:
        return False
    try:
        return any(t.type == tokenize.COMMENT for t in tokenize.generate_tokens(io.StringIO(textwrap.dedent(text) + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return True


# -- a fix's edits, laid out ----------------------------------------------------------------------


def restyled(fix, source):
    """`fix` (an `invariant_check.api.types.Fix` of `source`) with the statements it writes laid
    out in the project's style; the fix itself when it writes no code (a comment removed) or
    when the layout cannot be told."""
    from dataclasses import replace

    from .edits import apply_to_text
    from .types import Edit

    writes_code = any(
        line.strip() and not line.strip().startswith("#") for e in fix.edits for line in e.content.split("\n")
    )
    if not writes_code:
        return fix
    old = source.text
    new = apply_to_text(old, fix.edits)
    styled = restyle(old, new, style_for(source.path))
    if styled == new:
        return fix
    a, b = old.split("\n"), styled.split("\n")
    edits = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i2 >= len(a) or j2 >= len(b):
            return fix  # the file's last line, without a newline: left as the fix wrote it
        edits.append(Edit(i1 + 1, 1, i2 + 1, 1, "".join(line + "\n" for line in b[j1:j2])))
    if not edits or apply_to_text(old, edits) != styled:
        return fix
    return replace(fix, edits=tuple(edits))
