"""Value facts of one function: which value a loop leaves behind, and where values are checked.

After `for g in groups: md = g.build()`, `md` holds the *last* group's value: `LastValues`
walks a function's statements in order and knows, at every check, whether the checked value
is such a loop leftover (`Produced`) or one entry picked out of a collection (`OneEntry`:
`next(iter(d.values()))`, `d[names[-1]]`, `list(d.values())[0]`, `d.popitem()`,
`*_, last = d.values()`, also one assignment or a walrus away: `first = ...; check(first)`).
`xs[0]` is a first entry only of a collection the function filled with entries itself (a
comprehension, `list(d.values())`, stores in a loop); of anything else it is a tuple's field.
Whether the other entries matter after the check is `consumption`'s question.

What a loop leaves behind: names bound in its body or target (assignment, unpacking, `with ...
as`, walrus, nested loops, `except ... as`), also `self.x` attributes. Not a leftover: a loop
that `break`s (a search), a loop over one element (`singletons`: `[x]`, `range(1)`, `xs[:1]`,
or after `assert len(xs) == 1` / `if len(xs) != 1: raise`), a name whose new value reads its old one
(an accumulator: `md = merge(md, g.build())`), a name bound again before the check, a loop in
one branch only.

A *check* is where a value is validated or dispatched on: `isinstance`/`type(...)` in an
`assert`, an `if` test or a boolean later branched on (`ok = isinstance(...)`), `assert ...x...`
and `if ...x...: raise`, and a call of a function that validates its parameter (the caller
says which, from the project's summaries).
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from .facts import FUNCS, last_name, pattern_names, push_children, ref
from .needs import LAST_INDEX, NEXT_OF_ITER, Around, Names, Pattern, bound
from .singletons import collection as _collection
from .singletons import guarantee_of, one_element, source


COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class Produced:
    """A value whose current binding is the last one a loop produced."""

    loop: ast.AST  # For / AsyncFor / While, a comprehension whose walrus bound it, or the
    # call of a function that returns what its own loop left


@dataclass(frozen=True)
class OneEntry:
    """One entry of a collection, picked on purpose: ('last'|'first', collection source).
    `positional`: `xs[0]` of a plain name, which may as well be a tuple's first field: an
    entry only when the name says it holds entries."""

    which: str
    collection: str
    collection_node: ast.AST
    positional: bool = False


@dataclass
class Check:
    node: ast.AST  # what is reported: the isinstance/type call, the assert test, the call
    subject: ast.AST  # the checked expression
    kind: str  # 'type', 'match' (class patterns of a `match`), 'assert', 'raise', 'helper'
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
# a call -> the positions of its result (None: the whole value) that the callee's loop left
Returned = Callable[[ast.Call], frozenset]


@dataclass(frozen=True, eq=False)
class Pending:
    """A name bound to a call's result (position `index` of a returned tuple, None: the whole
    value) that may be a loop leftover of the function called. The function is looked into
    only when a type check (`isinstance`/`type`) reads the name: following every call's
    result, or every one that an assert, a raise or a helper reads, would cost a resolution
    per call."""

    call: ast.Call
    index: int | None


@dataclass
class _Acc:
    """What a loop body binds (at any depth, outside nested defs) and whether it breaks."""

    names: set[str] = field(default_factory=set)
    breaks: bool = False
    accumulators: set[str] = field(default_factory=set)
    fresh: set[str] = field(default_factory=set)


class LastValues:
    """Walks one function (or a module's top-level code) and yields every check of a loop
    leftover or a one-entry value."""

    def __init__(self, func: ast.AST, is_validator: Validator | None = None, source=None, returned: Returned | None = None) -> None:
        self.func = func
        self.is_validator = is_validator or (lambda call, pos, names: False)
        # which results of a call are a loop's leftover in the function it calls (its
        # `return per_layer, attn_metadata` after the group loop)
        self.returned = returned or (lambda call: frozenset())
        self.found: list[Finding] = []
        # what this function's returns hand back that a loop left behind: tuple positions
        # (None: the whole value), on every return that returns something
        self.returns_leftover: list[frozenset] = []
        # the module's text: a statement whose text names no tracked value (and holds no
        # one-entry shape) is not walked
        self._text = source.text if source is not None else None
        self._starts = source.line_starts if source is not None else None
        self._returned_memo: dict[int, frozenset] = {}

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
        if "next" in seg or "pop" in seg or ("-" in seg and _MINUS_ONE.search(seg)) or ("[" in seg and _ZERO_INDEX.search(seg)):
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

    def _get(self, state, name: str | None):
        """What `state` tracks for a name, a pending call result settled: the callee's loop
        leftover (`Produced`) or nothing."""
        origin = state.get(name) if name is not None else None
        if not isinstance(origin, Pending):
            return origin
        key = id(origin.call)
        positions = self._returned_memo.get(key)
        if positions is None:
            positions = self._returned_memo[key] = self.returned(origin.call)
        return Produced(origin.call) if origin.index in positions else None

    def run(self) -> list[Finding]:
        body = self.func.body if isinstance(self.func, (*FUNCS, ast.Module)) else []
        self._top = _Acc()
        # collections this function fills with entries of one kind (a comprehension, a loop
        # storing into it): `xs[0]` of one is its first entry, not a tuple's first field
        self._collections: set[str] = set()
        self._loop_targets: list[set[str]] = []  # the targets of the loops around a statement
        self._block(body, {}, set(), self._top, {})
        return self.found

    def _shape(self, expr: ast.AST):
        return _shape(expr, self._collections)

    def _keyed_by_loop(self, expr: ast.AST) -> bool:
        """`d[keys[0]]` where `keys` is read from a target of an enclosing loop."""
        if not (isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Subscript)):
            return False
        keys = ref(expr.slice.value)
        active = set().union(*self._loop_targets) if self._loop_targets else set()
        return keys is not None and keys.split(".")[0] in active

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
            # a value picked out of a collection, one assignment away; not one keyed by what
            # the loop iterates (`d[group.layer_names[0]]` in `for group in groups`: one entry
            # of every group)
            if value is not None:
                shape = self._shape(value)
                if shape is not None and not self._keyed_by_loop(value):
                    state[name] = OneEntry(*shape)

    def _stmt(self, st, state, singles, acc, flags) -> None:
        if isinstance(st, (*FUNCS, ast.ClassDef)):
            self._bind([st.name], state, acc)
            return  # their own scope
        if isinstance(st, ast.Assert):
            self._check_test(st.test, st, state, flags, raises=True)
            single = guarantee_of(st)
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
            if value is not None:
                self._walrus(value, state, acc)
            self._bind(names, state, acc, value if len(names) == 1 else None, reads)
            if isinstance(value, ast.Call) and len(targets) == 1:
                # `per_layer, md = self._build(cad)`: maybe a loop leftover of the callee
                t = targets[0]
                if isinstance(t, ast.Name) and t.id not in state:
                    state[t.id] = Pending(value, None)
                elif isinstance(t, ast.Tuple):
                    for i, e in enumerate(t.elts):
                        if isinstance(e, ast.Name) and e.id not in state:
                            state[e.id] = Pending(value, i)
            # `k, md = d.popitem()`, `first, *rest = d.values()`
            if value is not None and len(targets) == 1 and len(names) > 1:
                state.update(unpacked_entries(targets[0], value, self._collections))
            self._note_collection(targets, value, acc)
            if isinstance(st, ast.Assign):
                single = guarantee_of(st)  # `(md,) = d.values()`
                if single:
                    singles.add(single)
            if flag_check is not None and len(names) == 1:
                flags[names[0]] = (flag_check, st)
            return
        if isinstance(st, ast.Expr):
            self._check_calls(st.value, st, state)
            self._walrus(st.value, state, acc)
            call = st.value
            if acc is not self._top and isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in _FILLS:
                r = ref(call.func.value)
                if r is not None:
                    self._collections.add(r)
            return
        if isinstance(st, ast.Raise):
            return
        if isinstance(st, ast.Break):
            acc.breaks = True
            return
        if isinstance(st, (ast.Return,)):
            if st.value is not None:
                self._check_calls(st.value, st, state)
                elts = st.value.elts if isinstance(st.value, ast.Tuple) else [st.value]
                positions = {
                    (i if isinstance(st.value, ast.Tuple) else None)
                    for i, e in enumerate(elts)
                    if isinstance(e, ast.Name) and isinstance(state.get(e.id), Produced)
                }
                self.returns_leftover.append(frozenset(positions))
            return
        if isinstance(st, ast.If):
            raises = _raises(st.body)
            self._check_test(st.test, st, state, flags, raises=raises)
            self._walrus(st.test, state, acc)
            single = guarantee_of(st)
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
            self._match_check(st, state)
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

    def _note_collection(self, targets, value, acc) -> None:
        if value is None:
            return
        if _builds_entries(value) or ref(value) in self._collections:
            self._collections.update(t.id for t in targets if isinstance(t, ast.Name))
        if acc is not self._top:  # `xs[k] = v` in a loop
            for t in targets:
                if isinstance(t, ast.Subscript):
                    r = ref(t.value)
                    if r is not None:
                        self._collections.add(r)

    def _walrus(self, expr, state, acc) -> None:
        seg = self._segment(expr)
        if seg is not None and ":=" not in seg:
            return
        # `[(md := build(g)) for g in groups]`: the walrus binds in the enclosing function,
        # and what it leaves behind is the last element's value
        comps = [n for n in ast.walk(expr) if isinstance(n, COMPREHENSIONS)]
        in_comp = {id(w): c for c in comps for w in ast.walk(c) if isinstance(w, ast.NamedExpr)}
        for node in ast.walk(expr):
            if not isinstance(node, ast.NamedExpr):
                continue
            comp = in_comp.get(id(node))
            if comp is None:
                self._bind([node.target.id], state, acc, node.value, node.target.id in _refs_read(node.value))
            else:
                self._bind([node.target.id], state, acc)
                if not one_element(comp.generators[0].iter, set()):
                    state[node.target.id] = Produced(comp)

    def _loop(self, loop, state, singles, acc, flags) -> None:
        inner_acc = _Acc()
        targets = list(_target_refs(loop.target)) if isinstance(loop, (ast.For, ast.AsyncFor)) else []
        if isinstance(loop, ast.While):
            self._check_test(loop.test, loop, state, flags, raises=False, in_loop_test=True)
        inner = dict(state)
        for name in targets:
            inner.pop(name, None)
        self._loop_targets.append(set(targets))
        try:
            self._block(loop.body, inner, set(singles), inner_acc, dict(flags))
        finally:
            self._loop_targets.pop()
        bound = inner_acc.names | set(targets)
        acc.names |= bound
        for name in bound:
            state.pop(name, None)
        one = isinstance(loop, (ast.For, ast.AsyncFor)) and one_element(loop.iter, singles)
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
        # 1. isinstance(x, T) / type(x) <op> T, also of a value a comprehension does not bind
        # (`any(isinstance(md, t) for t in types)` checks the one `md`)
        for call in (*_calls_in(test), *_free_calls(test)):
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
                if origin is not None and not isinstance(origin, Pending):
                    kind = "assert" if isinstance(stmt, ast.Assert) else "raise"
                    check = Check(test, name_node, kind, None, True, stmt)
                    self.found.append(Finding(check, name, origin))
                    return
            for sub in _walk_expr(test):
                shape = self._shape(sub)
                if shape is not None:
                    kind = "assert" if isinstance(stmt, ast.Assert) else "raise"
                    via = sub.target.id if isinstance(sub, ast.NamedExpr) else None
                    self.found.append(Finding(Check(test, sub, kind, None, True, stmt), shape[1], OneEntry(*shape), via))
                    return
        self._check_calls(test, stmt, state, skip_types=True)

    def _match_check(self, st, state) -> None:
        """`match md:` with class patterns (`case TreeAttentionMetadata():`): a type check of
        the subject, as `isinstance` is; a validation when a case raises (`case _: raise`),
        a dispatch otherwise. Reported at the subject; `types` holds the patterns' classes."""
        classes = [p.cls for case in st.cases for p in ast.walk(case.pattern) if type(p).__name__ == "MatchClass"]
        if not classes or not self._may_matter(st.subject, state):
            return
        origin, name, via = self._origin(st.subject, state)
        if origin is None:
            return
        validates = any(_raises(case.body) for case in st.cases)
        types = ast.Tuple(elts=classes, ctx=ast.Load())
        self.found.append(Finding(Check(st.subject, st.subject, "match", types, validates, st), name, origin, via))

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

    def _origin(self, subject: ast.AST, state, settle: bool = True) -> tuple[Produced | OneEntry | Pending | None, str, str | None]:
        """Whether a checked expression is a loop leftover or a one-entry value: the value
        itself, its root (`md.kind`), or a subscript by a loop's own variable
        (`per_layer[name]` after `for name in names`). `settle=False`: a call's result that
        may be a leftover is answered as `Pending`, without looking into the function."""
        get = self._get if settle else (lambda st, name: st.get(name) if name is not None else None)
        shape = self._shape(subject)
        if shape is not None:
            # `isinstance(md := next(iter(d.values())), T)`: the entry goes on as `md`
            via = subject.target.id if isinstance(subject, ast.NamedExpr) else None
            return OneEntry(*shape), shape[1], via
        for candidate in _subject_refs(subject):
            origin = get(state, candidate)
            if origin is not None:
                via = candidate if isinstance(origin, OneEntry) else None
                return origin, (origin.collection if isinstance(origin, OneEntry) else candidate), via
        node = subject
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            if isinstance(node, ast.Subscript):
                index = ref(node.slice)
                settled = get(state, index)
                if index is not None and isinstance(settled, (Produced, Pending)):
                    coll = ref(node.value) or source(node.value)
                    return settled, coll, index
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
                # a call's result is looked into (is it the callee's loop leftover?) for a
                # type check, an assert or a raise of it, not for every call it is passed to
                origin, name, via = self._origin(arg, state, settle=False)
                if origin is None or isinstance(origin, Pending):
                    continue
                names = tuple(n for n in (name, via, getattr(origin, "collection", None)) if n)
                if self.is_validator(call, pos, names):
                    self.found.append(Finding(Check(call, arg, "helper", None, True, stmt), name, origin, via))
                    return


# -- helpers ----------------------------------------------------------------------------------
_MINUS_ONE = re.compile(r"-[\s(]*1(?![\w.])")
_ZERO_INDEX = re.compile(r"\[[\s(]*0[\s)]*\]")
_FILLS = frozenset({"append", "add", "insert", "extend", "update", "setdefault"})
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _builds_entries(value: ast.AST) -> bool:
    """A comprehension, or `list(...)`/`tuple(...)`/`sorted(...)` of one or of `d.values()`."""
    if isinstance(value, _COMPREHENSIONS):
        return True
    if isinstance(value, ast.Call) and ref(value.func) in ("list", "tuple", "sorted") and len(value.args) == 1:
        inner = value.args[0]
        return isinstance(inner, _COMPREHENSIONS) or _collection(inner) is not inner
    return False


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
    # (the walk is most of what the value analysis costs: a type lookup, one call per node)
    stack = [expr]
    pop = stack.pop
    while stack:
        node = pop()
        yield node
        if type(node) in _OTHER_SCOPES and node is not expr:
            continue
        children: list[ast.AST] = []
        push_children(node, children)
        children.reverse()
        stack.extend(children)


_OTHER_SCOPES = frozenset({ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp})


def _calls_in(expr: ast.AST) -> Iterator[ast.Call]:
    for node in _walk_expr(expr):
        if isinstance(node, ast.Call):
            yield node


def _free_calls(expr: ast.AST) -> Iterator[ast.Call]:
    """Calls inside the comprehensions of an expression whose first argument reads only names
    no comprehension around it binds: they read the enclosing function's values."""
    for node in _walk_expr(expr):
        if type(node) not in _COMPREHENSIONS or node is expr:
            continue
        bound = {n.id for gen in node.generators for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
        for sub in ast.walk(node):
            if type(sub) in _COMPREHENSIONS and sub is not node:
                bound |= {n.id for gen in sub.generators for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and sub.args:
                names = [n.id for n in ast.walk(sub.args[0]) if isinstance(n, ast.Name)]
                if names and not bound.intersection(names):
                    yield sub


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


def entry_shape(expr: ast.AST) -> tuple[str, str, ast.AST] | None:
    """('last'|'first', collection source, collection node) for one-entry picks:
    `d[names[-1]]`, `d[-1]`, `list(d.values())[-1]`, `next(reversed(d...))`, `d.popitem()`,
    `xs.pop()`, `xs.pop(-1)` (the last); `d[names[0]]`, `d[0]`, `list(d.values())[0]`,
    `next(iter(d...))` (with or without a default), `xs.pop(0)` (the first)."""
    shape = _shape(expr)
    return shape[:3] if shape is not None else None


def _shape(expr: ast.AST, collections: set[str] | None = None) -> tuple[str, str, ast.AST, bool] | None:
    """`entry_shape`, and whether the pick is a `[0]` of a plain name (`positional`); with
    `collections`, such a `[0]` is a pick only of one of them."""
    if collections is not None:
        shape = _shape(expr)
        if shape is not None and shape[3] and shape[1] not in collections:
            return None
        return shape
    if isinstance(expr, ast.NamedExpr):
        return _shape(expr.value)
    if isinstance(expr, ast.Subscript):
        index = expr.slice
        popped = _popped(expr.value)
        if popped is not None:  # `d.popitem()[1]`: the popped entry's value
            return popped
        which = _index_which(index)
        if which is None and isinstance(index, ast.Subscript):
            which = _index_which(index.slice)  # `d[names[-1]]`: the entry of the last name
            positional = False
        else:
            positional = isinstance(expr.value, (ast.Name, ast.Attribute))
        if which is not None:
            coll = _collection(expr.value)
            if one_element(coll, set()):
                return None  # the only entry there is (`[md][0]`, a batch built from one-element lists)
            if coll is not expr.value:
                positional = False  # `list(d.values())[0]`: entries by construction
            return which, source(coll), coll, positional and which == "first"
        return None
    if isinstance(expr, ast.Call) and ref(expr.func) == "next" and expr.args:
        arg = expr.args[0]
        if isinstance(arg, ast.Call) and ref(arg.func) in ("reversed", "iter") and arg.args:
            coll = _collection(arg.args[0])
            return ("last" if ref(arg.func) == "reversed" else "first"), source(coll), coll, False
    return _popped(expr)


def _popped(expr: ast.AST) -> tuple[str, str, ast.AST, bool] | None:
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.keywords:
        attr, args = expr.func.attr, expr.args
        coll = expr.func.value
        if attr == "popitem" and not args:
            return "last", source(coll), coll, False
        if attr == "pop" and not args:
            return "last", source(coll), coll, False
        if attr == "pop" and len(args) == 1:
            which = _index_which(args[0])
            if which is not None:
                return which, source(coll), coll, False
    return None


def _index_which(index: ast.AST) -> str | None:
    if _is_minus_one(index):
        return "last"
    if isinstance(index, ast.Constant) and index.value == 0 and not isinstance(index.value, bool):
        return "first"
    return None


# calls whose result is the entries of a collection (`first, *rest = d.values()`)
_ITERATING = frozenset({"values", "items", "keys", "list", "tuple", "sorted", "reversed", "iter", "filter", "map"})


def unpacked_entries(target: ast.AST, value: ast.AST, collections: set[str] | None = None) -> dict[str, OneEntry]:
    """The names of an unpacking that receive a picked entry: `k, md = d.popitem()`,
    `_, md = next(iter(d.items()))` (every name: the key and the entry), `first, *rest =
    d.values()`, `*rest, last = mds` (the name beside the starred one)."""
    if not isinstance(target, (ast.Tuple, ast.List)):
        return {}
    shape = _shape(value, collections)
    if shape is not None:
        names = [n for n in _target_refs(target)]
        return {n: OneEntry(*shape) for n in names}
    elts = target.elts
    stars = [i for i, e in enumerate(elts) if isinstance(e, ast.Starred)]
    if len(stars) != 1 or len(elts) != 2:
        return {}
    if isinstance(value, ast.Call) and last_name(value.func) not in _ITERATING:
        return {}  # `md, *_ = f(...)`: the fields of the tuple a function returns, not entries
    coll = _collection(value)
    which, other = ("first", elts[1 - stars[0]]) if stars[0] == 1 else ("last", elts[0 if stars[0] else 1])
    if isinstance(other, (ast.Name, ast.Attribute)) and ref(other):
        return {ref(other): OneEntry(which, source(coll), coll, False)}
    return {}


# -- what the prefilter needs to see for a one-entry pick ---------------------------------------
# The literals come from `_shape` and `unpacked_entries` above: a `[0]`/`[-1]` subscript, `.pop(`
# or `.popitem(`, `next(iter(` / `next(reversed(`, a starred target.
FIRST_INDEX = Pattern(r"\[[\s(]*0[\s)]*\]", "0", "a `[0]` subscript")
POP_CALL = Pattern(r"\.\s*pop(?:item)?\s*\(", "pop", "`.pop(...)` / `.popitem()`")
STAR_TARGET = Pattern(r"\*\s*\w+\s*(?:,[^=\n]*)?=(?!=)", "*", "a starred assignment target")
_PICK_AFTER = (
    r"(?:\s*\.\s*(?:values|items|keys)\s*\(\s*\))?\s*\)?\s*"
    r"(?:\[[^\]]*?(?:-[\s(]*1|0)(?![\w.])|\.\s*pop(?:item)?\s*\()"
)
_PICK_BEFORE = (
    r"(?:\bnext\s*\(\s*(?:iter|reversed)\s*\(\s*"
    r"|\*\s*\w+\s*(?:,[^=\n]*)?=\s*)(?:(?:list|tuple)\s*\(\s*)?$"
)


def picked(names: Names) -> Around:
    """One entry picked out of a collection named by `names`, in every spelling `_shape` and
    `unpacked_entries` read (a superset: `d[10]` passes too)."""
    return Around(names, after=_PICK_AFTER, before=_PICK_BEFORE, before_words=("next", "*"),
                  describe=f"one entry of {names.describe()}")

ONE_ENTRY_SHAPES = (LAST_INDEX, NEXT_OF_ITER, FIRST_INDEX, POP_CALL, STAR_TARGET)


class PickedInto(Around):
    """A name matching `names` bound by a statement that holds a one-entry pick: the local
    name a picked entry goes on as (`md, *_ = build()`, `md = next(iter(d.values()))`,
    `(md := d[names[-1]])`), what `LastValues` records as a finding's `via` or, for an
    `assert`/`raise` of it, its name. The pick is looked for in the whole statement that binds
    the name (its lines joined by brackets or backslashes); where the statement cannot be
    told (an unterminated string), in the rest of the range."""

    cost = 10

    def __init__(self, names: Names) -> None:
        binding = bound(names)
        super().__init__(names, after=binding.after.pattern, before=binding.before.pattern,
                         before_words=binding.before_words, describe=f"{names.describe()} bound to one entry")

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        end = len(text) if end is None else end
        spans = self.names.occurrences(text, start, end)
        if not spans or not any(p.holds(text, start, end) for p in ONE_ENTRY_SHAPES):
            return False
        in_context = self._contexts(text)
        # the statements are split only as far as the occurrences asked about (most answers
        # come at the first one)
        pending = iter_statement_starts(text, start, end)
        starts: list[int] = []
        for a, b in spans:
            if not in_context(a, b):
                continue
            while not starts or starts[-1] <= a:
                nxt = next(pending, None)
                if nxt is None:
                    break
                starts.append(nxt)
            i = bisect.bisect_right(starts, a) - 1
            lo, hi = starts[i], starts[i + 1] if i + 1 < len(starts) else end
            if any(p.holds(text, lo, hi) for p in ONE_ENTRY_SHAPES):
                return True
        return False


# the tokens that decide where a statement ends: strings, comments, continuations, brackets,
# newlines and `;`
_STATEMENT_TOKEN = re.compile(r"'''|\"\"\"|'|\"|#[^\n]*|\\\r?\n|[()\[\]{}]|\r\n?|\n|;")
_STRING_END = {
    "'''": re.compile(r"(?:[^\\]|\\.)*?'''", re.DOTALL),
    '"""': re.compile(r'(?:[^\\]|\\.)*?"""', re.DOTALL),
    "'": re.compile(r"(?:[^\\'\r\n]|\\.)*'"),
    '"': re.compile(r'(?:[^\\"\r\n]|\\.)*"'),
}


def statement_starts(text: str, start: int, end: int) -> list[int]:
    """Offsets where the statements of `text[start:end]` begin (`start` begins one), as
    Python's tokenizer splits them: a newline or `;` outside brackets, strings and comments.
    An unterminated string ends the list there (the rest counts as one statement)."""
    return list(iter_statement_starts(text, start, end))


def iter_statement_starts(text: str, start: int, end: int) -> Iterator[int]:
    """`statement_starts`, one offset at a time."""
    yield start
    depth = 0
    pos = start
    while True:
        m = _STATEMENT_TOKEN.search(text, pos, end)
        if m is None:
            return
        tok, pos = m.group(), m.end()
        if tok in _STRING_END:
            close = _STRING_END[tok].match(text, pos, end)
            if close is None:
                return
            pos = close.end()
        elif tok in ("(", "[", "{"):
            depth += 1
        elif tok in (")", "]", "}"):
            depth = max(depth - 1, 0)
        elif tok in (";", "\n", "\r", "\r\n") and depth == 0:
            yield pos


def loop_collection(loop: ast.AST, name: str) -> str | None:
    """The collection a loop's per-entry value belongs to: `d` when the body stores `name`
    into `d[...]` or `d.append(name)` / `d.add(name)`, else when `name` is the loop's own
    variable over `d`, `d.values()` or `d.items()`; None when neither is spelled."""
    return _stored_into(loop, name) or _iterated(loop, name)


def _iterated(loop: ast.AST, name: str) -> str | None:
    if isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.target, ast.Name) and loop.target.id == name:
        it = loop.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("values", "items") and not it.args:
            return ref(it.func.value)
        return ref(it)
    return None


def _stored_into(loop: ast.AST, name: str) -> str | None:
    for node in ast.walk(loop):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id == name:
            for t in node.targets:
                if isinstance(t, ast.Subscript):
                    r = ref(t.value)
                    if r:
                        return r
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "add")
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == name
        ):
            r = ref(node.func.value)
            if r:
                return r
    return None
