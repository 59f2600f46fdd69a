"""Value facts of one function: which value a loop leaves behind, and where values are checked.

After `for g in groups: md = g.build()`, `md` holds the *last* group's value: `LastValues`
walks a function's statements in order and knows, at every check, whether the checked value
is such a loop leftover (`Produced`) or one entry picked out of a collection (`OneEntry`:
`next(iter(d.values()))`, `d[names[-1]]`, also one assignment away: `first = ...; check(first)`).

What a loop leaves behind: names bound in its body or target (assignment, unpacking, `with ...
as`, walrus, nested loops, `except ... as`), also `self.x` attributes. Not a leftover: a loop
that `break`s (a search), a loop over one element (`[x]`, `range(1)`, `xs[:1]`, or after
`assert len(xs) == 1` / `if len(xs) != 1: raise`), a name whose new value reads its old one
(an accumulator: `md = merge(md, g.build())`), a name bound again before the check, a loop in
one branch only.

A *check* is where a value is validated or dispatched on: `isinstance`/`type(...)` in an
`assert`, an `if` test or a boolean later branched on (`ok = isinstance(...)`), `assert ...x...`
and `if ...x...: raise`, and a call of a function that validates its parameter (the caller
says which, from the project's summaries).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from .facts import FUNCS, pattern_names, ref


@dataclass(frozen=True)
class Produced:
    """A value whose current binding is the last one a loop produced."""

    loop: ast.AST  # For / AsyncFor / While


@dataclass(frozen=True)
class OneEntry:
    """One entry of a collection, picked on purpose: ('last'|'first', collection source)."""

    which: str
    collection: str
    collection_node: ast.AST


@dataclass
class Check:
    node: ast.AST  # what is reported: the isinstance/type call, the assert test, the call
    subject: ast.AST  # the checked expression
    kind: str  # 'type', 'assert', 'raise', 'helper'
    types: ast.AST | None  # the type(s) checked against, for type checks
    validates: bool  # raises/asserts on failure (a validation), or picks a path (a dispatch)
    statement: ast.AST  # the statement holding the check


@dataclass
class Finding:
    check: Check
    name: str  # the checked name (or the collection for one-entry shapes)
    origin: Produced | OneEntry
    via: str | None = None  # the local name a one-entry value went through


# a call that validates its argument: (call, argument position, the names the value goes by:
# the tracked name, the local it went through, the collection it was picked from) -> bool; the
# names let a rule skip values it does not care about before asking the project
# (the call, the argument's position or keyword, the names the argument stands for)
Validator = Callable[[ast.Call, "int | str", tuple[str, ...]], bool]


@dataclass
class _Acc:
    """What a loop body binds (at any depth, outside nested defs) and whether it breaks."""

    names: set[str] = field(default_factory=set)
    breaks: bool = False
    accumulators: set[str] = field(default_factory=set)
    fresh: set[str] = field(default_factory=set)


def source(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:
        return ast.dump(node)


class LastValues:
    """Walks one function (or a module's top-level code) and yields every check of a loop
    leftover or a one-entry value."""

    def __init__(self, func: ast.AST, is_validator: Validator | None = None, source=None) -> None:
        self.func = func
        self.is_validator = is_validator or (lambda call, pos, names: False)
        self.found: list[Finding] = []
        # the module's text: a statement whose text names no tracked value (and holds no
        # one-entry shape) is not walked
        self._text = source.text if source is not None else None
        self._starts = source.line_starts if source is not None else None

    def _segment(self, node: ast.AST) -> str | None:
        if self._text is None or not hasattr(node, "lineno"):
            return None
        end_line = getattr(node, "end_lineno", None) or node.lineno
        lo = self._starts[node.lineno - 1] if node.lineno - 1 < len(self._starts) else len(self._text)
        hi = self._starts[end_line] if end_line < len(self._starts) else len(self._text)
        return self._text[lo:hi]

    def _may_matter(self, node: ast.AST, state, flags=None, words: tuple[str, ...] = ()) -> bool:
        """Whether a statement can hold a check of a tracked value or a one-entry pick:
        its text names one of them, or a one-entry shape (`next(`, `-1`), or `words`."""
        seg = self._segment(node)
        if seg is None:
            return True
        if "next" in seg or ("-" in seg and _MINUS_ONE.search(seg)):
            return True
        for w in words:
            if w in seg:
                return True
        for name in state:
            if name.rsplit(".", 1)[-1] in seg:
                return True
        for name in flags or ():
            if name in seg:
                return True
        return False

    def run(self) -> list[Finding]:
        body = self.func.body if isinstance(self.func, (*FUNCS, ast.Module)) else []
        self._top = _Acc()
        self._block(body, {}, set(), self._top, {})
        return self.found

    # -- walking ------------------------------------------------------------------------
    def _block(self, stmts, state, singles, acc, flags) -> None:
        for st in stmts:
            self._stmt(st, state, singles, acc, flags)

    def _bind(self, names: Iterable[str], state, acc, value: ast.AST | None = None, reads_self: bool = False) -> None:
        for name in names:
            state.pop(name, None)
            if reads_self and name not in acc.fresh:
                acc.accumulators.add(name)
            acc.names.add(name)
            acc.fresh.add(name)
            # a value picked out of a collection, one assignment away
            if value is not None:
                shape = _entry_shape(value)
                if shape is not None:
                    state[name] = OneEntry(*shape)

    def _stmt(self, st, state, singles, acc, flags) -> None:
        if isinstance(st, (*FUNCS, ast.ClassDef)):
            self._bind([st.name], state, acc)
            return  # their own scope
        if isinstance(st, ast.Assert):
            self._check_test(st.test, st, state, flags, raises=True)
            single = _single_subject(st.test, positive=True)
            if single:
                singles.add(single)
            return
        if isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            value = st.value
            if value is not None:
                self._check_calls(value, st, state)
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            names = [n for t in targets for n in _target_refs(t)]
            reads = False
            if value is not None and acc is not self._top:
                seg = self._segment(value)
                if seg is None or any(n.rsplit(".", 1)[-1] in seg for n in names):
                    reads = any(n in _refs_read(value) for n in names)
            if isinstance(st, ast.AugAssign):
                reads = True
            # `ok = isinstance(md, T)`: a flag that a later branch may turn into a check
            flag_check = None
            if value is not None and len(names) == 1:
                flag_check = _type_call_in(value)
            self._bind(names, state, acc, value if len(names) == 1 else None, reads)
            if flag_check is not None and len(names) == 1:
                flags[names[0]] = (flag_check, st)
            return
        if isinstance(st, ast.Expr):
            self._check_calls(st.value, st, state)
            self._walrus(st.value, state, acc)
            return
        if isinstance(st, ast.Raise):
            return
        if isinstance(st, ast.Break):
            acc.breaks = True
            return
        if isinstance(st, (ast.Return,)):
            if st.value is not None:
                self._check_calls(st.value, st, state)
            return
        if isinstance(st, ast.If):
            raises = _raises(st.body)
            self._check_test(st.test, st, state, flags, raises=raises)
            self._walrus(st.test, state, acc)
            single = _single_subject(st.test, positive=False) if raises else None
            body_state = dict(state)
            self._block(st.body, body_state, set(singles), acc, dict(flags))
            else_state = dict(state)
            self._block(st.orelse, else_state, set(singles), acc, dict(flags))
            _merge(state, body_state, else_state)
            if single:
                singles.add(single)
            return
        if isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
            self._loop(st, state, singles, acc, flags)
            return
        if isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            self._block(st.body, state, singles, acc, flags)
            for handler in st.handlers:
                if handler.name:
                    self._bind([handler.name], state, acc)
                self._block(handler.body, state, singles, acc, flags)
            self._block(st.orelse, state, singles, acc, flags)
            self._block(st.finalbody, state, singles, acc, flags)
            return
        if isinstance(st, (ast.With, ast.AsyncWith)):
            for item in st.items:
                self._check_calls(item.context_expr, st, state)
                if item.optional_vars is not None:
                    self._bind(list(_target_refs(item.optional_vars)), state, acc, item.context_expr)
            self._block(st.body, state, singles, acc, flags)
            return
        if type(st).__name__ == "Match":
            before = dict(state)
            for case in st.cases:
                case_state = dict(before)
                names = [n for n in pattern_names(case.pattern)]
                self._bind(names, case_state, acc)
                self._block(case.body, case_state, set(singles), acc, dict(flags))
                for name in set(before) - set(case_state):
                    state.pop(name, None)
                for name in names:
                    state.pop(name, None)
            return
        if isinstance(st, ast.Delete):
            self._bind([n for t in st.targets for n in _target_refs(t)], state, acc)
            return
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            self._bind([(a.asname or a.name).split(".")[0] for a in st.names if a.name != "*"], state, acc)
            return
        if isinstance(st, (ast.Global, ast.Nonlocal)):
            return

    def _walrus(self, expr, state, acc) -> None:
        seg = self._segment(expr)
        if seg is not None and ":=" not in seg:
            return
        for node in _walk_expr(expr):
            if isinstance(node, ast.NamedExpr):
                self._bind([node.target.id], state, acc, node.value, node.target.id in _refs_read(node.value))

    def _loop(self, loop, state, singles, acc, flags) -> None:
        inner_acc = _Acc()
        targets = list(_target_refs(loop.target)) if isinstance(loop, (ast.For, ast.AsyncFor)) else []
        if isinstance(loop, ast.While):
            self._check_test(loop.test, loop, state, flags, raises=False, in_loop_test=True)
        inner = dict(state)
        for name in targets:
            inner.pop(name, None)
        self._block(loop.body, inner, set(singles), inner_acc, dict(flags))
        bound = inner_acc.names | set(targets)
        acc.names |= bound
        for name in bound:
            state.pop(name, None)
        one = isinstance(loop, (ast.For, ast.AsyncFor)) and _single_element(loop.iter, singles)
        if not inner_acc.breaks and not one:
            for name in bound - inner_acc.accumulators:
                state[name] = Produced(loop)
        if loop.orelse:
            self._block(loop.orelse, state, singles, acc, flags)

    # -- checks ------------------------------------------------------------------------------
    def _check_test(self, test, stmt, state, flags, *, raises: bool, in_loop_test: bool = False) -> None:
        """A test of an `assert`, `if` or `while`: type checks anywhere in it; for an assert or
        an `if` that raises, also any mention of a tracked value; flags branched on."""
        # a check reports a tracked value or a one-entry pick: without either in its text, none
        if not self._may_matter(test, state, flags):
            return
        # 1. isinstance(x, T) / type(x) <op> T
        for call in _calls_in(test):
            found = self._type_check(call, test, stmt, state, validates=raises)
            if found:
                return
        # 2. a flag assigned from a type check, branched on here
        for node in _walk_expr(test):
            if isinstance(node, ast.Name) and node.id in flags:
                call, _ = flags[node.id]
                if self._type_check(call, call, stmt, state, validates=raises):
                    return
        if in_loop_test:
            return
        # 3. assert / if ...: raise that reads a tracked value
        if raises:
            for name_node in _refs_in(test):
                name = ref(name_node)
                origin = state.get(name)
                if origin is not None:
                    kind = "assert" if isinstance(stmt, ast.Assert) else "raise"
                    check = Check(test, name_node, kind, None, True, stmt)
                    self.found.append(Finding(check, name, origin))
                    return
            for sub in _walk_expr(test):
                shape = _entry_shape(sub)
                if shape is not None:
                    kind = "assert" if isinstance(stmt, ast.Assert) else "raise"
                    self.found.append(Finding(Check(test, sub, kind, None, True, stmt), shape[1], OneEntry(*shape)))
                    return
        self._check_calls(test, stmt, state, skip_types=True)

    def _type_check(self, call: ast.Call, test, stmt, state, *, validates: bool) -> bool:
        fname = ref(call.func)
        if fname == "isinstance" and len(call.args) >= 2:
            subject, types = call.args[0], call.args[1]
        elif fname == "type" and len(call.args) == 1:
            subject, types = call.args[0], _compared_types(test, call)
        else:
            return False
        origin, name, via = self._origin(subject, state)
        if origin is None:
            return False
        self.found.append(Finding(Check(call, subject, "type", types, validates, stmt), name, origin, via))
        return True

    def _origin(self, subject: ast.AST, state) -> tuple[Produced | OneEntry | None, str, str | None]:
        """Whether a checked expression is a loop leftover or a one-entry value: the value
        itself, its root (`md.kind`), or a subscript by a loop's own variable
        (`per_layer[name]` after `for name in names`)."""
        shape = _entry_shape(subject)
        if shape is not None:
            return OneEntry(*shape), shape[1], None
        for candidate in _subject_refs(subject):
            origin = state.get(candidate)
            if origin is not None:
                via = candidate if isinstance(origin, OneEntry) else None
                return origin, (origin.collection if isinstance(origin, OneEntry) else candidate), via
        node = subject
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            if isinstance(node, ast.Subscript):
                index = ref(node.slice)
                if index is not None and isinstance(state.get(index), Produced):
                    coll = ref(node.value) or source(node.value)
                    return state[index], coll, index
            node = node.func if isinstance(node, ast.Call) else node.value
        return None, "", None

    def _check_calls(self, expr, stmt, state, *, skip_types: bool = False) -> None:
        """Calls of validating functions with a tracked value as an argument."""
        if not self._may_matter(expr, state):
            return
        for call in _calls_in(expr):
            fname = ref(call.func)
            if fname in ("isinstance", "type"):
                continue
            passed = [*enumerate(call.args), *((kw.arg, kw.value) for kw in call.keywords if kw.arg)]
            for pos, arg in passed:
                origin, name, via = self._origin(arg, state)
                if origin is None:
                    continue
                names = tuple(n for n in (name, via, getattr(origin, "collection", None)) if n)
                if self.is_validator(call, pos, names):
                    self.found.append(Finding(Check(call, arg, "helper", None, True, stmt), name, origin, via))
                    return


# -- helpers ----------------------------------------------------------------------------------
_MINUS_ONE = re.compile(r"-[\s(]*1(?![\w.])")



def _merge(state, a, b) -> None:
    """After an if/else: keep a tracked binding only if both branches keep it."""
    keep = {name: origin for name, origin in a.items() if b.get(name) == origin}
    state.clear()
    state.update(keep)


def _raises(body: list[ast.stmt]) -> bool:
    return any(isinstance(s, ast.Raise) for s in body)


def _target_refs(target: ast.AST) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Attribute):
        r = ref(target)
        if r is not None:
            yield r
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_refs(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_refs(target.value)


def _walk_expr(expr: ast.AST) -> Iterator[ast.AST]:
    """The nodes of an expression, not entering lambdas or comprehensions (other scopes)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) and node is not expr:
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _calls_in(expr: ast.AST) -> Iterator[ast.Call]:
    for node in _walk_expr(expr):
        if isinstance(node, ast.Call):
            yield node


def _refs_in(expr: ast.AST) -> Iterator[ast.AST]:
    """Name and attribute-chain nodes read by an expression, outermost chains first."""
    for node in _walk_expr(expr):
        if isinstance(node, (ast.Name, ast.Attribute)) and ref(node) is not None:
            yield node


def _refs_read(expr: ast.AST) -> set[str]:
    out = set()
    for node in _walk_expr(expr):
        if isinstance(node, (ast.Name, ast.Attribute)):
            r = ref(node)
            if r is not None:
                out.add(r)
    return out


def _subject_refs(subject: ast.AST) -> list[str]:
    """`md.kind.x` -> ['md.kind.x', 'md.kind', 'md']: the tracked value may be any prefix."""
    node = subject
    while isinstance(node, (ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    out = []
    r = ref(node)
    while r:
        out.append(r)
        if "." not in r:
            break
        r = r.rsplit(".", 1)[0]
    return out


def _type_call_in(value: ast.AST) -> ast.Call | None:
    for call in _calls_in(value):
        name = ref(call.func)
        if name == "isinstance" and len(call.args) >= 2 or name == "type" and len(call.args) == 1:
            return call
    return None


def _compared_types(test: ast.AST, type_call: ast.Call) -> ast.AST | None:
    for node in _walk_expr(test):
        if isinstance(node, ast.Compare) and node.left is type_call and node.comparators:
            return node.comparators[0]
    return None


def _is_minus_one(expr: ast.AST) -> bool:
    return (
        isinstance(expr, ast.UnaryOp)
        and isinstance(expr.op, ast.USub)
        and isinstance(expr.operand, ast.Constant)
        and expr.operand.value == 1
    ) or (isinstance(expr, ast.Constant) and expr.value == -1)


def _collection(expr: ast.AST) -> ast.AST:
    """`d` for `d`, `d.values()`, `d.items()`, `d.keys()`, `list(d.values())`, `tuple(d)`."""
    if isinstance(expr, ast.Call) and ref(expr.func) in ("list", "tuple") and len(expr.args) == 1:
        expr = expr.args[0]
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr in ("values", "items", "keys")
        and not expr.args
    ):
        expr = expr.func.value
    return expr


def _entry_shape(expr: ast.AST) -> tuple[str, str, ast.AST] | None:
    """('last'|'first', collection source, collection node) for one-entry picks:
    `d[names[-1]]`, `d[-1]`, `list(d.values())[-1]`, `next(reversed(d...))`, `next(iter(d...))`."""
    if isinstance(expr, ast.Subscript):
        index = expr.slice
        if _is_minus_one(index) or (isinstance(index, ast.Subscript) and _is_minus_one(index.slice)):
            coll = _collection(expr.value)
            return "last", source(coll), coll
    if isinstance(expr, ast.Call) and ref(expr.func) == "next" and expr.args:
        arg = expr.args[0]
        if isinstance(arg, ast.Call) and ref(arg.func) in ("reversed", "iter") and arg.args:
            coll = _collection(arg.args[0])
            return ("last" if ref(arg.func) == "reversed" else "first"), source(coll), coll
    return None


def _single_element(it: ast.AST, singles: set[str]) -> bool:
    if isinstance(it, (ast.List, ast.Tuple, ast.Set)):
        return len(it.elts) == 1 and not isinstance(it.elts[0], ast.Starred)
    if isinstance(it, ast.Call) and ref(it.func) == "range" and len(it.args) == 1:
        a = it.args[0]
        if isinstance(a, ast.Constant) and a.value == 1:
            return True
    if isinstance(it, ast.Subscript) and isinstance(it.slice, ast.Slice) and it.slice.step is None:
        lower = source(it.slice.lower) if it.slice.lower is not None else "0"
        upper = source(it.slice.upper) if it.slice.upper is not None else None
        if (lower, upper) in {("0", "1"), ("-1", None)}:
            return True
    for candidate in _iter_subjects(it):
        if candidate in singles:
            return True
    return False


def _iter_subjects(it: ast.AST) -> Iterator[str]:
    """The collection a loop iterates, spelled every way a length guarantee may name it."""
    yield source(it)
    inner = it
    while isinstance(inner, ast.Call) and len(inner.args) == 1 and ref(inner.func) in (
        "list", "tuple", "sorted", "reversed", "enumerate", "iter"
    ):
        inner = inner.args[0]
        yield source(inner)
    coll = _collection(inner)
    yield source(coll)


def _len_subject(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and ref(node.func) == "len" and len(node.args) == 1:
        return source(_collection(node.args[0]))
    return None


def _single_subject(test: ast.AST, *, positive: bool) -> str | None:
    """`xs` when `test` being true (`positive`, an assert) or false (an `if` that raises)
    guarantees `len(xs) == 1` (or at most one)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _single_subject(test.operand, positive=not positive)
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return None
    op, right, left = test.ops[0], test.comparators[0], test.left
    subject = _len_subject(left)
    number = right
    if subject is None:
        subject = _len_subject(right)
        number = left
        op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(type(op), op)
    if subject is None or not isinstance(number, ast.Constant) or not isinstance(number.value, int):
        return None
    k = number.value
    if positive:
        ok = (isinstance(op, ast.Eq) and k == 1) or (isinstance(op, ast.LtE) and k == 1) or (isinstance(op, ast.Lt) and k == 2)
    else:  # the test is what raises: its negation holds afterwards
        ok = (isinstance(op, ast.NotEq) and k == 1) or (isinstance(op, ast.Gt) and k == 1) or (isinstance(op, ast.GtE) and k == 2)
    return subject if ok else None
