"""Where the entries a one-entry check did not see go: the *consumption* of a check.

A check that sees one entry of a collection (the last value a loop produced, a first or last
pick) is harmful only when the entries it did not see are used after it. `other_entries`
answers that for one check (a `values.Finding`) with a `Use`:

Not consumed:
- `single`: there are no other entries (see `singletons`: a collection spelled or guaranteed
  to hold one, also through every write of a `self` attribute);
- `covered`: after the check, every entry is checked before the collection is used again: a
  loop over it that checks each entry (`assert`/`if ...: raise` on the loop variable, or a
  call of a function that validates it), `all(...)` over it in an `assert`/`if ...: raise`,
  or a call of a function that does either with it;
- `entry-only`: after the check the function goes on with the checked entry only (reads it,
  passes it on, returns it), and the other entries are neither read after the check nor were
  they handed on before it. A type test of the checked entry after the check does not count
  as going on with it: its answer speaks for the entry's group, not for the entry.

Consumed:
- `used`: the collection holding the other entries is read after the check (iterated,
  subscripted, passed to a call, returned, stored; an attribute of `self` also by a method of
  `self` called after the check, two calls deep), on a path not covered by a full check;
- `handed-on`: the other entries went, before the check, where this function cannot follow
  them: the loop passed each value to a call or stored it outside the function (`self.x`, a
  parameter's entry), or the collection was passed to a call (`set_forward_context(per_layer)`)
  or stored;
- `unseen`: after the check neither the checked entry nor the others are used: the check
  guards code this function does not show (its caller, a later method), which sees them all.

What holds the other entries: for a loop leftover, every container the loop stores the value
into (`d[k] = md`, `d.update({k: md ...})`, `d.update(dict.fromkeys(names, md))`,
`xs.append(md)`), for a pick, the collection it was picked from; and every local name bound to
one of these or built from it (`per_layer = {n: md for n, md in zip(names, mds)}`), until it is
bound to something else. Not a use of the entries: `len(d)`, `d is None`, `not d`, `k in d`,
`d.keys()`, `isinstance(d, T)`, a store into `d`, and picking the same entry again.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Iterator

from .facts import FUNCS, child_nodes, ref
from .singletons import (
    GROWS,
    attribute_holds_one,
    collection,
    guarantee_of,
    guaranteed_single,
    one_object,
    self_attribute,
    spellings,
)

# calls that read no entry of their argument, or only its type
_NO_ENTRY_CALLS = frozenset({"len", "isinstance", "issubclass", "id", "type", "bool", "hasattr", "callable"})
# calls that build a container from their argument: the result holds the same entries
_BUILDERS = frozenset({
    "list", "tuple", "dict", "set", "frozenset", "sorted", "reversed", "zip", "enumerate", "iter",
    "copy", "copy.copy", "copy.deepcopy", "chain", "itertools.chain", "OrderedDict", "dict.fromkeys",
})
# methods of a container that read no entry, or that only write one
_NO_ENTRY_METHODS = frozenset({"keys", "clear", "__len__", "__contains__"}) | GROWS
_BUILDER_METHODS = frozenset({"values", "items", "copy"})

Validator = Callable[[ast.Call, "int | str", tuple[str, ...]], bool]


@dataclass(frozen=True)
class Use:
    consumed: bool
    reason: str  # single | covered | entry-only | used | handed-on | unseen
    node: ast.AST | None = None  # where the other entries are used or handed on


@dataclass
class _State:
    holders: set[str]
    entries: set[str]
    covered: bool = False


@dataclass
class _Result:
    use: ast.AST | None = None  # the first use of the other entries (a call, or the statement)
    entry_used: bool = False
    covered: bool = False
    at: ast.stmt | None = None  # the statement being read

    def used(self, node: ast.AST | None) -> None:
        if self.use is None:
            self.use = node if isinstance(node, ast.Call) else self.at


@dataclass
class _Target:
    """What the question is about: the check, where its entry was picked, and how a re-pick
    of the same entry is spelled."""

    check: ast.stmt
    intro: ast.stmt  # the statement from which the holders are what they are
    loop: ast.AST | None  # the loop that produced the value (loop leftovers)
    key: str | None  # 'first' / 'last' / 'key:<name>': a re-pick of the checked entry
    escaped: ast.AST | None = None
    view: object = None


def other_entries(view, finding, validator: Validator | None = None) -> Use:
    """Whether the entries `finding`'s check did not see are used after it (see the module)."""
    from .values import COMPREHENSIONS, Produced

    func = view.node
    body = func.body if isinstance(func, (*FUNCS, ast.Module)) else []
    check = finding.check.statement
    validator = validator or (lambda call, pos, names: False)
    origin = finding.origin
    order = list(_statements(body))

    if isinstance(origin, Produced) and isinstance(origin.loop, ast.Call):
        # the last value of a loop in the function called (`per_layer, md = self._build()`):
        # the other values are in what the same call returned beside it
        loop = origin.loop
        holders = set()
        for st in order:
            if isinstance(st, ast.Assign) and st.value is loop:
                for t in st.targets:
                    elts = t.elts if isinstance(t, ast.Tuple) else [t]
                    holders |= {e.id for e in elts if isinstance(e, ast.Name) and e.id != finding.name}
        target = _Target(check, _statement_of(order, loop), None, None, None)
        entries = {finding.name}
    elif isinstance(origin, Produced) and isinstance(origin.loop, COMPREHENSIONS):
        # a walrus left behind by a comprehension: the other values are in what the
        # comprehension built (`group_md = [(md := ...) for ...]`)
        loop = origin.loop
        holders = set()
        for st in order:
            if isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None and any(n is loop for n in ast.walk(st.value)):
                for t in st.targets if isinstance(st, ast.Assign) else [st.target]:
                    if isinstance(t, ast.Name):
                        holders.add(t.id)
        target = _Target(check, loop, loop, None, None if holders else loop)
        holders, entries = holders, {finding.name}
    elif isinstance(origin, Produced):
        loop = origin.loop
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            attr = self_attribute(loop.iter)
            if attr is not None and attribute_holds_one(view, attr):
                return Use(False, "single")
        if finding.via and finding.via != finding.name:
            # `per_layer[layer_name]` after `for layer_name in ...`: the collection holds them
            holders, entries, key = {finding.name}, set(), f"key:{finding.via}"
            escaped = None if _is_local(finding.name, func) else loop
        else:
            holders, escaped = _handed_on(loop, finding.name, func)
            entries, key = {finding.name}, None
            # `for md in per_layer.values():` leaves `md` behind: the others stay in
            # `per_layer`, as they do when the loop reads `md = per_layer[name]`
            source_coll = _read_from(loop, finding.name)
            if source_coll is not None:
                holders.add(source_coll)
        target = _Target(check, loop, loop, key, escaped)
    else:
        coll = origin.collection_node
        if _single_before(body, order, check, coll, func):
            return Use(False, "single")
        attr = self_attribute(coll)
        if attr is not None and attribute_holds_one(view, attr):
            return Use(False, "single")
        root = _root_ref(coll)
        holders = {root} if root else set()
        entries = {finding.via} if finding.via else set()
        intro = _pick_statement(order, check, finding.via) if finding.via else check
        target = _Target(check, intro, None, origin.which)
    target.view = view
    state = _State(set(holders), set(entries))
    _before(order, target, state)
    result = _Result()
    _after(body, target, state, result, view, validator)
    if result.use is not None:
        return Use(True, "used", result.use)
    if result.covered:
        return Use(False, "covered")
    if target.escaped is not None:
        return Use(True, "handed-on", target.escaped)
    if result.entry_used:
        return Use(False, "entry-only")
    return Use(True, "unseen")


# -- before the check -------------------------------------------------------------------------


def _statement_of(order: list[ast.stmt], node: ast.AST) -> ast.stmt:
    """The statement (of `order`) holding `node`, innermost."""
    found = order[0]
    for st in order:
        if any(sub is node for sub in ast.walk(st)):
            found = st
    return found


def _handed_on(loop: ast.AST, name: str, func: ast.AST) -> tuple[set[str], ast.AST | None]:
    """The containers a loop stores its value into, and the first place it hands the value on
    to something this function cannot follow (a call, an attribute, a non-local container)."""
    holders: set[str] = set()
    escaped: ast.AST | None = None
    carriers = {name}  # the value, and locals built from it inside the loop
    for st in _statements(loop.body):
        for node in _walk(st):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _mentions(node.value, carriers):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Subscript):
                        r = _root_ref(t.value)
                        if r is None or not _is_local(r, func):
                            escaped = escaped or node
                        else:
                            holders.add(r)
                    elif isinstance(t, ast.Attribute):
                        if ref(t) != name:
                            escaped = escaped or node
                    else:
                        carriers.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.Call):
                args = [*node.args, *(k.value for k in node.keywords)]
                if not any(_mentions(a, carriers) for a in args):
                    continue
                fname = ref(node.func)
                if isinstance(node.func, ast.Attribute) and node.func.attr in GROWS:
                    r = _root_ref(node.func.value)
                    if r is None or not _is_local(r, func):
                        escaped = escaped or node
                    else:
                        holders.add(r)
                elif fname in _NO_ENTRY_CALLS or fname in _BUILDERS:
                    continue
                else:
                    escaped = escaped or node
            elif isinstance(node, (ast.Yield, ast.YieldFrom, ast.Return)) and node.value is not None and _mentions(node.value, carriers):
                escaped = escaped or node
    return holders, escaped


def _before(order: list[ast.stmt], target: _Target, state: _State) -> None:
    """Follow the holders from where they are known to the check: names bound to them join
    them, a holder bound to something else leaves them; a holder passed to a call or stored
    outside the function before the check hands its entries on."""
    check_at = _pos(target.check)
    intro_at = _pos(target.intro)
    inside = _span(target.loop) if target.loop is not None else None
    func = getattr(target.view, "node", None)
    dead = _not_before(func.body, target.check) if isinstance(func, (*FUNCS, ast.Module)) else set()
    for st in order:
        at = _pos(st)
        if at >= check_at:
            break
        if inside is not None and inside[0] <= at <= inside[1]:
            continue
        if id(st) in dead:
            continue  # a branch that returns or raises: no path from it reaches the check
        if st is target.loop:
            continue
        started = at >= intro_at
        if isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None:
            value = st.value
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            pick = _pick(value, state.holders)
            if pick is not None and started:
                for n in names:
                    state.holders.discard(n)
                    state.entries.add(n)
                continue
            if _mentions(value, state.holders):
                hand = _escape_in(value, state.holders)
                if hand is not None and target.escaped is None:
                    target.escaped = hand
                if any(isinstance(t, (ast.Attribute, ast.Subscript)) and not _stores_into_holder(t, state.holders) for t in targets):
                    if target.escaped is None and _is_alias_expr(value, state.holders):
                        target.escaped = st
                if _is_alias_expr(value, state.holders):
                    state.holders.update(names)
                continue
            if started:
                for n in names:
                    state.holders.discard(n)
                    state.entries.discard(n)
            continue
        for expr in _own_exprs(st):
            if _mentions(expr, state.holders) and target.escaped is None:
                if isinstance(st, (ast.Return, ast.Expr)) and isinstance(expr, (ast.Yield, ast.YieldFrom)):
                    target.escaped = st
                else:
                    target.escaped = _escape_in(expr, state.holders)


def _not_before(body: list[ast.stmt], check: ast.stmt) -> set[int]:
    """The statements of blocks that end in `return` or `raise` and do not hold the check:
    earlier in the source, but on no path that reaches it."""
    out: set[int] = set()

    def holds(stmts: list[ast.stmt]) -> bool:
        return any(sub is check for st in stmts for sub in ast.walk(st))

    def visit(stmts: list[ast.stmt]) -> None:
        if stmts and isinstance(stmts[-1], (ast.Return, ast.Raise)) and not holds(stmts):
            out.update(id(sub) for st in stmts for sub in ast.walk(st) if isinstance(sub, ast.stmt))
            return
        for st in stmts:
            if isinstance(st, (*FUNCS, ast.ClassDef)):
                continue
            for name in ("body", "orelse", "finalbody"):
                block = getattr(st, name, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    visit(block)
            for handler in getattr(st, "handlers", None) or []:
                visit(handler.body)
            for case in getattr(st, "cases", None) or []:
                visit(case.body)

    visit(body)
    return out


def _escape_in(expr: ast.AST, holders: set[str]) -> ast.AST | None:
    """A call in `expr` that receives a holder as an argument (not one that only reads its
    length or type, or builds a container from it)."""
    for node in _walk_expr(expr):
        if not isinstance(node, ast.Call):
            continue
        fname = ref(node.func)
        if fname in _NO_ENTRY_CALLS or fname in _BUILDERS:
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in _NO_ENTRY_METHODS | _BUILDER_METHODS:
            continue
        for a in [*node.args, *(k.value for k in node.keywords)]:
            if _holder_at(a, holders):
                return node
    return None


def _pick_statement(order: list[ast.stmt], check: ast.stmt, via: str) -> ast.stmt:
    """The last statement before the check that binds `via` (where the entry was picked)."""
    found = check
    at = _pos(check)
    for st in order:
        if _pos(st) >= at:
            break
        if isinstance(st, (ast.Assign, ast.AnnAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            if any(via in _target_refs(t) for t in targets):
                found = st
        elif any(isinstance(n, ast.NamedExpr) and n.target.id == via for n in _walk(st)):
            found = st
    return found


def _single_before(body, order: list[ast.stmt], check: ast.stmt, coll: ast.AST, func: ast.AST) -> bool:
    """The collection holds one entry (or one object) where the check runs: a guarantee
    before it, an enclosing `if len(xs) == 1:`, or a local bound once to a mapping whose
    values are all one object and not stored into."""
    names = set(spellings(coll))
    at = _pos(check)
    for st in order:
        if _pos(st) >= at:
            break
        g = guarantee_of(st)
        if g is not None and g in names:
            return True
    for _block, _idx, owner, kind in _path(body, check) or []:
        if isinstance(owner, ast.If) and kind in ("body", "orelse"):
            if guaranteed_single(owner.test, positive=kind == "body") in names:
                return True
    root = _root_ref(coll)
    if root is not None and _is_local(root, func):
        binds = []
        for st in order:
            for node in _walk(st):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        if isinstance(t, ast.Name) and t.id == root:
                            binds.append(node)
                        elif isinstance(t, ast.Subscript) and ref(t.value) == root:
                            return False
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in GROWS and ref(node.func.value) == root:
                    return False
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.NamedExpr, ast.With)):
                    if root in _bound_names(node):
                        return False
        if len(binds) == 1 and isinstance(binds[0], ast.Assign) and one_object(binds[0].value):
            return True
    return False


def _bound_names(node: ast.AST) -> set[str]:
    if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        return set(_target_refs(node.target))
    if isinstance(node, ast.NamedExpr):
        return {node.target.id}
    if isinstance(node, ast.With):
        return {r for item in node.items if item.optional_vars is not None for r in _target_refs(item.optional_vars)}
    return set()


def _read_from(loop: ast.AST, name: str) -> str | None:
    """The collection a loop reads its leftover from: its iterable when `name` is the loop's
    own variable, or `d` when the body binds `name = d[...]` / `d.get(...)`."""
    if isinstance(loop, (ast.For, ast.AsyncFor)) and name in set(_target_refs(loop.target)):
        it = loop.iter
        while isinstance(it, ast.Call) and ref(it.func) in ("list", "tuple", "sorted", "reversed", "enumerate", "iter") and it.args:
            it = it.args[0]
        return _root_ref(it)
    for st in _statements(loop.body):
        if isinstance(st, ast.Assign) and any(ref(t) == name for t in st.targets):
            value = st.value
            if isinstance(value, ast.Subscript):
                return _root_ref(value.value)
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "get":
                return _root_ref(value.func.value)
    return None


# -- after the check --------------------------------------------------------------------------


def _after(body, target: _Target, state: _State, result: _Result, view, validator: Validator) -> None:
    path = _path(body, target.check)
    if path is None:
        return
    check = target.check
    # the check's own branches (a dispatch decides between them)
    if isinstance(check, ast.If):
        branches = [_seq(check.body, _copy(state), target, result, view, validator),
                    _seq(check.orelse, _copy(state), target, result, view, validator)]
        state, done = _merge(state, branches)
        if done:
            return
    elif isinstance(check, (ast.While, ast.For, ast.AsyncFor)):
        _seq(check.body, _copy(state), target, result, view, validator)
    for block, idx, owner, kind in reversed(path):
        state, done = _seq(block[idx + 1 :], state, target, result, view, validator)
        if done:
            return
        if isinstance(owner, (ast.For, ast.AsyncFor, ast.While)) and kind == "body":
            # the next iteration runs the statements before the check again
            _seq(block[:idx], _copy(state), target, result, view, validator)
        elif kind == "body" and (isinstance(owner, ast.Try) or type(owner).__name__ == "TryStar"):
            for handler in owner.handlers:
                _seq(handler.body, _copy(state), target, result, view, validator)
            state, done = _seq(owner.orelse, state, target, result, view, validator)
            if done:
                return
        if owner is not None and kind in ("body", "handler", "orelse") and hasattr(owner, "finalbody") and owner.finalbody:
            state, done = _seq(owner.finalbody, state, target, result, view, validator)
            if done:
                return


def _seq(stmts, state: _State, target: _Target, result: _Result, view, validator) -> tuple[_State, bool]:
    """Scan statements in order; returns the state after them and whether every path through
    them ends (return/raise)."""
    for st in stmts:
        state, done = _stmt(st, state, target, result, view, validator)
        if done:
            return state, True
    return state, False


def _stmt(st, state: _State, target: _Target, result: _Result, view, validator) -> tuple[_State, bool]:
    result.at = st
    if not state.covered and _covers(st, state.holders, view, validator, 2):
        state.covered = True
        result.covered = True
        return state, False
    if isinstance(st, ast.Return):
        if st.value is not None:
            _expr(st.value, state, target, result)
        return state, True
    if isinstance(st, ast.Raise):
        return state, True
    if isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        value = st.value
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        for t in targets:
            if not isinstance(t, ast.Name):
                _expr(t, state, target, result, store=True)
        if value is None:
            return state, False
        if isinstance(st, ast.AugAssign):
            _expr(value, state, target, result)
            return state, False
        if _mentions(value, state.holders) and _is_alias_expr(value, state.holders) and _pick(value, state.holders) is None:
            if all(isinstance(t, ast.Name) for t in targets):
                state.holders.update(names)
                return state, False
        _expr(value, state, target, result)
        carried = _mentions(value, state.holders | state.entries)
        for n in names:
            if not carried:
                state.holders.discard(n)
                state.entries.discard(n)
        return state, False
    if isinstance(st, ast.If):
        _expr(st.test, state, target, result, test=True)
        branches = [_seq(st.body, _copy(state), target, result, view, validator),
                    _seq(st.orelse, _copy(state), target, result, view, validator)]
        return _merge(state, branches)
    if isinstance(st, (ast.For, ast.AsyncFor)):
        _expr(st.iter, state, target, result)
        inner = _copy(state)
        for n in _target_refs(st.target):
            inner.holders.discard(n)
            inner.entries.discard(n)
        _seq(st.body, inner, target, result, view, validator)
        _seq(st.orelse, _copy(state), target, result, view, validator)
        return state, False
    if isinstance(st, ast.While):
        _expr(st.test, state, target, result, test=True)
        _seq(st.body, _copy(state), target, result, view, validator)
        _seq(st.orelse, _copy(state), target, result, view, validator)
        return state, False
    if isinstance(st, (ast.With, ast.AsyncWith)):
        for item in st.items:
            _expr(item.context_expr, state, target, result)
        return _seq(st.body, state, target, result, view, validator)
    if isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
        state, done = _seq(st.body, state, target, result, view, validator)
        for handler in st.handlers:
            _seq(handler.body, _copy(state), target, result, view, validator)
        if not done:
            state, done = _seq(st.orelse, state, target, result, view, validator)
        final, fdone = _seq(st.finalbody, _copy(state), target, result, view, validator)
        return (final if not done else state), done or fdone
    if type(st).__name__ == "Match":
        _expr(st.subject, state, target, result)
        outs = [_seq(case.body, _copy(state), target, result, view, validator) for case in st.cases]
        return _merge(state, outs + [(state, False)])
    if isinstance(st, (*FUNCS, ast.ClassDef, ast.Lambda)):
        # a closure that reads a holder uses the entries whenever it runs
        for node in ast.walk(st):
            r = ref(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
            if r in state.holders and not state.covered:
                result.used(None)
        return state, False
    if isinstance(st, ast.Expr):
        _expr(st.value, state, target, result, test=False)
        return state, False
    if isinstance(st, ast.Assert):
        _expr(st.test, state, target, result, test=True)
        return state, False
    if isinstance(st, ast.Delete):
        return state, False
    for expr in _own_exprs(st):
        _expr(expr, state, target, result)
    return state, False


def _expr(expr: ast.AST, state: _State, target: _Target, result: _Result, *, test: bool = False, store: bool = False) -> None:
    """Record what an expression does with the holders and the checked entry."""
    parents: dict[int, ast.AST] = {}
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call) and not state.covered and _method_reads(target.view, node, state.holders):
            result.used(node)  # `self.run_steps()` reads `self.per_layer_attn_metadata`
        r = ref(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if r is not None and (r in state.holders or r in state.entries):
            kind = _context(node, expr, parents, state, target, test, store)
            if r in state.entries and kind != "none":
                if kind in ("use", "entry"):
                    result.entry_used = True
            elif kind == "entry":
                result.entry_used = True
            elif kind == "use" and not state.covered:
                result.used(_report_node(node, parents))
            continue
        for child in child_nodes(node):
            parents[id(child)] = node
            stack.append(child)


def _context(node, root, parents, state: _State, target: _Target, test: bool, store: bool) -> str:
    """How an expression reads a holder (or the checked entry): 'none' (no entry: its length,
    its type, whether it is None or empty, a store into it), 'entry' (the checked entry again),
    or 'use'."""
    if store:
        return "none"
    p = parents.get(id(node))
    if p is None:
        return "none" if test else "use"
    # the same entry picked again, or another one
    anc, chain = node, []
    for _ in range(5):
        anc = parents.get(id(anc))
        if anc is None:
            break
        chain.append(anc)
        which = _pick_key(anc, state.holders)
        if which is not None:
            return "entry" if which == target.key else "use"
    if isinstance(p, ast.Call) and node in p.args and ref(p.func) in _NO_ENTRY_CALLS:
        return "none"
    if isinstance(p, ast.Attribute) and p.attr in _NO_ENTRY_METHODS and isinstance(parents.get(id(p)), ast.Call):
        return "none"
    if isinstance(p, ast.Compare):
        ops = p.ops
        if all(isinstance(o, (ast.Is, ast.IsNot)) for o in ops):
            return "none"
        if node is not p.left and all(isinstance(o, (ast.In, ast.NotIn)) for o in ops):
            return "none"
    if isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.Not):
        return "none"
    if isinstance(p, ast.BoolOp) and test and p is root:
        return "none"
    if isinstance(p, ast.Subscript) and p.value is node and isinstance(p.ctx, (ast.Store, ast.Del)):
        return "none"
    return "use"


def _report_node(node, parents) -> ast.AST:
    """The call or expression to name in the message: the innermost call around the use."""
    cur = node
    for _ in range(8):
        up = parents.get(id(cur))
        if up is None:
            break
        if isinstance(up, ast.Call) and not _builds(up):
            return up
        cur = up
    return node


def _builds(call: ast.Call) -> bool:
    """`d.values()`, `list(...)`: a call that only re-packs the entries."""
    if isinstance(call.func, ast.Attribute) and call.func.attr in _BUILDER_METHODS:
        return True
    return ref(call.func) in _BUILDERS


def _method_reads(view, call: ast.Call, holders: set[str], depth: int = 2) -> bool:
    """A call of a method of the same object (`self.m(...)`) that reads a holder that is an
    attribute of `self`, itself or through the methods of `self` it calls."""
    attrs = {h.split(".", 1)[1] for h in holders if h.startswith("self.") and h.count(".") == 1}
    callee = ref(call.func)
    if not attrs or view is None or callee is None or not callee.startswith("self.") or callee.count(".") != 1:
        return False
    fn = view.ctx.summaries().function_for(view.resolve(callee))
    return fn is not None and _reads_self(view, fn, attrs, depth, set())


def _reads_self(view, fn, attrs: set[str], depth: int, seen: set) -> bool:
    key = (str(fn.module.path), fn.qual)
    if key in seen:
        return False
    seen.add(key)
    node = fn.node()
    if node is None or not node.args.args:
        return False
    me = node.args.args[0].arg
    calls = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == me:
            if sub.attr in attrs:
                return True
        if isinstance(sub, ast.Call):
            r = ref(sub.func)
            if r is not None and r.startswith(me + ".") and r.count(".") == 1:
                calls.append(r.split(".", 1)[1])
    if depth <= 0:
        return False
    summaries = view.ctx.summaries()
    for name in calls:
        target = summaries.function_for(summaries.resolve(fn, f"self.{name}"))
        if target is not None and _reads_self(view, target, attrs, depth - 1, seen):
            return True
    return False


# -- full checks ------------------------------------------------------------------------------


def _covers(st: ast.stmt, holders: set[str], view, validator: Validator, depth: int) -> bool:
    """Whether a statement checks every entry of a holder: a loop over it checking each, an
    `all(...)` over it in an assert/raise, a call of a function that does either."""
    if not holders:
        return False
    if isinstance(st, (ast.For, ast.AsyncFor)):
        if not _iterates(st.iter, holders):
            return False
        var = set(_target_refs(st.target))
        return _checks_each(st.body, var, holders, view, validator, depth)
    if isinstance(st, ast.Assert) or (isinstance(st, ast.If) and _raises(st.body)):
        test = st.test
        for node in ast.walk(test):
            if isinstance(node, ast.Call) and ref(node.func) == "all" and node.args:
                gen = node.args[0]
                if isinstance(gen, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
                    for comp in gen.generators:
                        if _iterates(comp.iter, holders):
                            var = set(_target_refs(comp.target))
                            if _mentions(gen.elt, var):
                                return True
    for expr in _own_exprs(st):
        for node in _walk_expr(expr):
            if isinstance(node, ast.Call) and depth > 0:
                for pos, arg in [*enumerate(node.args), *((k.arg, k.value) for k in node.keywords if k.arg)]:
                    r = ref(arg)
                    if r in holders and _helper_checks_each(node, pos, view, validator, depth - 1):
                        return True
    return False


def _checks_each(body, var: set[str], holders: set[str], view, validator: Validator, depth: int) -> bool:
    for st in _statements(body):
        if isinstance(st, ast.Assert) and _mentions(st.test, var):
            return True
        if isinstance(st, ast.If) and _raises(st.body) and _mentions(st.test, var):
            return True
        for expr in _own_exprs(st):
            for node in _walk_expr(expr):
                if isinstance(node, ast.Call):
                    for pos, arg in [*enumerate(node.args), *((k.arg, k.value) for k in node.keywords if k.arg)]:
                        r = ref(arg)
                        if r in var and validator(node, pos, (r, *sorted(holders))):
                            return True
    return False


def _helper_checks_each(call: ast.Call, pos, view, validator: Validator, depth: int) -> bool:
    """A call of a project function that checks every entry of the parameter it receives."""
    callee = ref(call.func)
    if callee is None or view is None:
        return False
    fn = view.ctx.summaries().function_for(view.resolve(callee))
    if fn is None:
        return False
    params = fn.facts.params
    if isinstance(pos, str):
        if pos not in params:
            return False
        name = pos
    else:
        bound = fn.facts.cls is not None and isinstance(call.func, ast.Attribute) and params[:1] in (["self"], ["cls"])
        index = pos + (1 if bound else 0)
        if index >= len(params):
            return False
        name = params[index]
    node = fn.node()
    if node is None:
        return False
    summaries = view.ctx.summaries()

    def validates(inner: ast.Call, at, names) -> bool:
        # a call inside the helper, resolved where the helper is
        target = summaries.function_for(summaries.resolve(fn, ref(inner.func)))
        if target is None:
            return False
        if isinstance(at, str):
            return at in target.facts.params and summaries.validates(target, target.facts.params.index(at))
        bound = target.facts.cls is not None and isinstance(inner.func, ast.Attribute) and target.facts.params[:1] in (["self"], ["cls"])
        return summaries.validates(target, at + (1 if bound else 0))

    return any(_covers(st, {name}, None, validates, depth) for st in _statements(node.body))


def _iterates(it: ast.AST, holders: set[str]) -> bool:
    inner = it
    while isinstance(inner, ast.Call) and ref(inner.func) in ("list", "tuple", "sorted", "reversed", "enumerate", "iter", "zip"):
        if ref(inner.func) == "zip":
            return any(_iterates(a, holders) for a in inner.args)
        if not inner.args:
            return False
        inner = inner.args[0]
    return ref(collection(inner)) in holders


# -- small helpers ----------------------------------------------------------------------------


def _pick(value: ast.AST, holders: set[str]) -> str | None:
    return _pick_key(value, holders)


def _pick_key(node: ast.AST, holders: set[str]) -> str | None:
    """'first'/'last'/'key:<index>' when `node` picks one entry of a holder."""
    from .values import entry_shape

    shape = entry_shape(node)
    if shape is not None:
        if _root_ref(shape[2]) in holders:
            return shape[0]
        return None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name) and ref(node.value) in holders:
        return f"key:{node.slice.id}"
    return None


def _is_alias_expr(value: ast.AST, holders: set[str]) -> bool:
    """An expression whose value holds a holder's entries, and nothing else is done with them:
    the holder itself, a container built from it (`list(d.values())`, `dict(d)`,
    `{k: v for k, v in d.items()}`, `dict(zip(names, mds))`, `d if c else {}`)."""
    found = False
    parents: dict[int, ast.AST] = {}
    stack = [value]
    while stack:
        node = stack.pop()
        r = ref(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if r is not None and r in holders:
            found = True
            cur = node
            while cur is not value:
                up = parents[id(cur)]
                if not _carries(up, cur):
                    return False
                cur = up
            continue
        for child in child_nodes(node):
            parents[id(child)] = node
            stack.append(child)
    return found


def _carries(up: ast.AST, child: ast.AST) -> bool:
    """Whether the value of `up` holds the entries of its part `child`."""
    if isinstance(up, ast.IfExp):
        return child is not up.test
    if isinstance(up, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Starred, ast.BoolOp)):
        return True
    if isinstance(up, ast.comprehension):
        return child is up.iter
    if isinstance(up, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        return isinstance(child, ast.comprehension)
    if isinstance(up, ast.Attribute):
        return up.attr in _BUILDER_METHODS
    if isinstance(up, ast.Call):
        if child is up.func:
            return isinstance(child, ast.Attribute) and child.attr in _BUILDER_METHODS
        return ref(up.func) in _BUILDERS
    return False


def _stores_into_holder(t: ast.AST, holders: set[str]) -> bool:
    return isinstance(t, ast.Subscript) and _root_ref(t.value) in holders


def _holder_at(expr: ast.AST, holders: set[str]) -> bool:
    """`expr` is a holder, or a container display / comprehension / builder holding one."""
    r = ref(expr)
    if r is not None:
        return r in holders
    if isinstance(expr, ast.Call) and ref(expr.func) in _NO_ENTRY_CALLS:
        return False
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("keys",):
        return False
    if isinstance(expr, ast.Subscript):
        return False  # one entry of it: a pick
    return _mentions(expr, holders)


def _mentions(expr: ast.AST, names: set[str]) -> bool:
    if not names:
        return False
    for node in ast.walk(expr):
        if isinstance(node, (ast.Name, ast.Attribute)):
            r = ref(node)
            if r is not None and r in names:
                return True
    return False


def _root_ref(node: ast.AST) -> str | None:
    """`d` for `d`, `d.values()`, `d[0]`, `self.x[k]` -> `self.x`."""
    node = collection(node)
    while isinstance(node, (ast.Subscript, ast.Call)):
        node = node.value if isinstance(node, ast.Subscript) else node.func
        if isinstance(node, ast.Attribute) and node.attr in ("values", "items", "keys"):
            node = node.value
    return ref(node)


def _is_local(name: str, func: ast.AST) -> bool:
    """A plain name that is not a parameter and not declared global/nonlocal."""
    if "." in name:
        return False
    if isinstance(func, FUNCS):
        a = func.args
        params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        if a.vararg:
            params.add(a.vararg.arg)
        if a.kwarg:
            params.add(a.kwarg.arg)
        if name in params:
            return False
        for node in ast.walk(func):
            if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
                return False
        return True
    return False  # module code: a global


def _target_refs(target: ast.AST) -> Iterator[str]:
    if isinstance(target, (ast.Name, ast.Attribute)):
        r = ref(target)
        if r is not None:
            yield r
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_refs(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_refs(target.value)


def _raises(body) -> bool:
    return any(isinstance(s, ast.Raise) for s in body)


def _copy(state: _State) -> _State:
    return _State(set(state.holders), set(state.entries), state.covered)


def _merge(state: _State, outs: list[tuple[_State, bool]]) -> tuple[_State, bool]:
    live = [s for s, done in outs if not done]
    if not live:
        return state, True
    merged = _State(set().union(*(s.holders for s in live)), set().union(*(s.entries for s in live)),
                    all(s.covered for s in live))
    return merged, False


def _pos(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _span(node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]]:
    return _pos(node), (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def _own_exprs(st: ast.stmt) -> Iterator[ast.AST]:
    """The expressions a statement evaluates itself (not those of its nested blocks)."""
    for name, value in ast.iter_fields(st):
        if name in ("body", "orelse", "finalbody", "handlers", "cases", "decorator_list"):
            continue
        if isinstance(value, ast.expr):
            yield value
        elif isinstance(value, list):
            for v in value:
                if isinstance(v, ast.expr):
                    yield v
                elif isinstance(v, ast.withitem):
                    yield v.context_expr


def _walk_expr(expr: ast.AST) -> Iterator[ast.AST]:
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child_nodes(node))


def _walk(st: ast.AST) -> Iterator[ast.AST]:
    """Nodes of a statement, not entering nested definitions."""
    stack = [st]
    while stack:
        node = stack.pop()
        yield node
        for child in child_nodes(node):
            if isinstance(child, (*FUNCS, ast.ClassDef)):
                continue
            stack.append(child)


def _statements(body) -> Iterator[ast.stmt]:
    """Statements in source order, nested blocks included, nested definitions not."""
    stack = list(reversed(body))
    while stack:
        st = stack.pop()
        yield st
        if isinstance(st, (*FUNCS, ast.ClassDef)):
            continue
        children: list[ast.stmt] = []
        for name in ("body", "orelse", "finalbody"):
            children.extend(getattr(st, name, None) or [])
        for h in getattr(st, "handlers", None) or []:
            children.extend(h.body)
        for c in getattr(st, "cases", None) or []:
            children.extend(c.body)
        stack.extend(reversed(children))


def _path(body, target: ast.stmt, owner=None, kind="body") -> list | None:
    """(block, index, owner, kind) from the function body down to `target`."""
    for i, st in enumerate(body):
        if st is target:
            return [(body, i, owner, kind)]
        if isinstance(st, (*FUNCS, ast.ClassDef)):
            continue
        blocks = [("body", getattr(st, "body", None)), ("orelse", getattr(st, "orelse", None)),
                  ("finalbody", getattr(st, "finalbody", None))]
        blocks += [("handler", h.body) for h in getattr(st, "handlers", None) or []]
        blocks += [("case", c.body) for c in getattr(st, "cases", None) or []]
        for k, block in blocks:
            if isinstance(block, list) and block:
                sub = _path(block, target, st, k)
                if sub is not None:
                    return [(body, i, owner, kind)] + sub
    return None
