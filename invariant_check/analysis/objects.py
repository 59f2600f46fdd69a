"""What a name holds: copies and aliases of objects, as queries any rule can ask.

- *Copies.* `copy.copy(x)`, `copy.deepcopy(x)`, `replace(x, ...)` / `x.replace(...)` /
  `dataclasses.replace(x, ...)`, and a project function that returns a copy of one of its
  parameters (`def shallow_copy(md): return copy.copy(md)`, through locals and further such
  helpers) make a *new object holding the old one's values*: every field not given anew keeps
  the value it had, stale or not. `copy_of` says which object an expression copies and which
  fields it gives anew.
- *Carriers.* Binding a name to a copy or to another name (`md = other_md`) replaces the object
  the name holds but not the values of its fields: `carries` tells such a binding from one that
  computes them (a builder's result, a constructor given new values).
- *Aliases.* `aliases_of` gives the names and container entries bound to one object in a
  function: `y = x`, `d = {k: x for k in ...}`, `d[k] = x`, `y = d[k]`, `for y in d.values()`.
  An update through any of them updates them all.
- *Fresh copies.* `fresh_copy_each_pass` says whether a loop binds a name, on each pass, to a
  new copy of an object the function builds itself and that neither the loop nor the code
  before it writes or hands to a call (no reader can have cached anything on it);
  `copy_spelled` (a call its name spells as a copy) and `handed_on` (what a call is given,
  its receiver included) are the spellings it reads.

Everything is a query over one function's `ast`, the project model and the summaries of the
functions it calls; nothing is kept beyond the summaries' memos.
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass
from typing import Callable

from .facts import last_name, ref, target_names, walk_local
from .project import FunctionInfo
from .summaries import Summaries

Resolver = Callable[[ast.Call], "FunctionInfo | None"]

_COPY_CALLS = frozenset({"copy.copy", "copy.deepcopy", "copy", "deepcopy"})
_REPLACE = "replace"
# a copy as its last name spells it (`copy_spelled`): `copy`, `deepcopy`, `replace`; `shallow_copy*` methods
_COPY_NAMES = frozenset({n.rpartition(".")[2] for n in _COPY_CALLS} | {_REPLACE})
_SHALLOW_COPY = "shallow_copy"


@dataclass(frozen=True)
class Copy:
    """An expression that makes a new object from `source` (a dotted ref): the fields in
    `given` are set anew, every other field keeps the source's value."""

    source: str
    given: frozenset[str]
    how: str  # 'copy', 'replace', 'helper'


def canonical(spelled: str | None, aliases: dict[str, str]) -> str | None:
    """`cad.seq_lens` -> `common_attn_metadata.seq_lens` through local aliases."""
    if spelled is None:
        return None
    for _ in range(8):
        head, dot, rest = spelled.partition(".")
        target = aliases.get(head)
        if target is None:
            break
        spelled = target + dot + rest
    return spelled


def copy_of(
    expr: ast.AST | None,
    aliases: dict[str, str],
    resolve: Resolver | None = None,
    summaries: Summaries | None = None,
    depth: int = 4,
) -> Copy | None:
    """The object `expr` copies, when it is a copy (see the module's documentation)."""
    if not isinstance(expr, ast.Call):
        return None
    func = expr.func
    spelled = ref(func)
    # the spellings first: a `replace` method forwards its keywords (`return replace(self,
    # **kwargs)`), which only the call site names
    if last_name(func) == _REPLACE:
        src = None
        if isinstance(func, ast.Attribute) and ref(func.value) not in ("dataclasses", None):
            src = canonical(ref(func.value), aliases)
        elif expr.args:
            src = canonical(ref(expr.args[0]), aliases)
        if src:
            return Copy(src, frozenset(k.arg for k in expr.keywords if k.arg), "replace")
        return None
    fn = resolve(expr) if resolve is not None else None
    if fn is None:
        if spelled in _COPY_CALLS and len(expr.args) >= 1:
            src = canonical(ref(expr.args[0]), aliases)
            return Copy(src, frozenset(), "copy") if src else None
        return None
    if summaries is None or depth <= 0:
        return None
    got = returned_copy(summaries, fn, depth - 1)
    if got is None:
        return None
    index, given = got
    arg = _argument(expr, fn, index)
    src = canonical(ref(arg), aliases) if arg is not None else None
    return Copy(src, given, "helper") if src else None


def _argument(call: ast.Call, fn: FunctionInfo, index: int) -> ast.AST | None:
    params = fn.facts.params
    offset = 1 if (fn.facts.cls is not None and isinstance(call.func, ast.Attribute) and params[:1] in (["self"], ["cls"])) else 0
    pos = index - offset
    if pos < 0:
        return call.func.value if isinstance(call.func, ast.Attribute) and pos == -1 else None
    if pos < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: pos + 1]):
        return call.args[pos]
    for kw in call.keywords:
        if index < len(params) and kw.arg == params[index]:
            return kw.value
    return None


# -- helpers that return a copy of a parameter -----------------------------------------------------

_RETURNED: "weakref.WeakKeyDictionary[Summaries, dict]" = weakref.WeakKeyDictionary()


def returned_copy(summaries: Summaries, fn: FunctionInfo, depth: int = 4) -> tuple[int, frozenset[str]] | None:
    """(parameter index, fields set anew) when every value `fn` returns is a copy of one of
    its parameters, made in it or by a function it calls; None otherwise."""
    table = _RETURNED.setdefault(summaries, {})
    key = (str(fn.module.path), fn.qual, depth)
    return summaries.project.tracker.memo(table, key, lambda: _returned_copy(summaries, fn, depth))


def _returned_copy(summaries: Summaries, fn: FunctionInfo, depth: int) -> tuple[int, frozenset[str]] | None:
    node = fn.node()
    if node is None:
        return None
    params = fn.facts.params
    returns = [s.value for s in walk_local(node) if isinstance(s, ast.Return)]
    if not returns or any(v is None for v in returns):
        return None
    bound = _single_bindings(node)
    resolve = _resolver(summaries, fn)
    found: set[tuple[int, frozenset[str]]] = set()
    for value in returns:
        given: frozenset[str] = frozenset()
        if isinstance(value, ast.Name) and value.id in bound:
            given = _fields_set(node, value.id)
            value = bound[value.id]
        got = copy_of(value, {}, resolve, summaries, depth)
        if got is None or got.source not in params:
            return None
        found.add((params.index(got.source), got.given | given))
    if len({i for i, _ in found}) != 1:
        return None
    index = next(iter(found))[0]
    return index, frozenset().union(*(g for _, g in found))


def _resolver(summaries: Summaries, fn: FunctionInfo) -> Resolver:
    def resolve(call: ast.Call) -> FunctionInfo | None:
        spelled = ref(call.func)
        if spelled is None:
            return None
        return summaries.function_for(summaries.resolve(fn, spelled))

    return resolve


def _single_bindings(node: ast.AST) -> dict[str, ast.AST]:
    """Local names bound exactly once, by a plain assignment, with their value."""
    count: dict[str, int] = {}
    value: dict[str, ast.AST] = {}
    for sub in walk_local(node):
        if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.NamedExpr)):
            targets: list[ast.AST] = []
            if isinstance(sub, ast.Assign):
                targets = sub.targets
            elif isinstance(sub, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                targets = [sub.target]
            elif isinstance(sub, (ast.For, ast.AsyncFor)):
                targets = [sub.target]
            else:
                targets = [i.optional_vars for i in sub.items if i.optional_vars is not None]
            for t in targets:
                for name in target_names(t):
                    count[name] = count.get(name, 0) + 1
                    if isinstance(sub, (ast.Assign, ast.AnnAssign)) and isinstance(t, ast.Name) and sub.value is not None:
                        value[name] = sub.value
    return {n: v for n, v in value.items() if count.get(n) == 1}


def _fields_set(node: ast.AST, name: str) -> frozenset[str]:
    """Fields a function assigns on the object a local name holds (`new.max_seq_len = ...`)."""
    out = set()
    for sub in walk_local(node):
        if isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == name:
                    out.add(t.attr)
    return frozenset(out)


# -- bindings that keep the old values ---------------------------------------------------------------


def bound_value(stmt: ast.AST | None, name: str) -> ast.AST | None:
    """The value a statement binds to the plain name `name` (None: not a plain binding)."""
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
        return stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
        return stmt.value
    if isinstance(stmt, ast.NamedExpr) and stmt.target.id == name:
        return stmt.value
    return None


def carries(
    value: ast.AST | None,
    fields: frozenset[str],
    aliases: dict[str, str],
    resolve: Resolver | None = None,
    summaries: Summaries | None = None,
) -> bool:
    """Whether binding a name to `value` keeps the old values of `fields`: `value` names
    another object (an alias, an entry of a container) or copies one without giving those
    fields anew."""
    if value is None:
        return False
    if ref(value) is not None and not isinstance(value, ast.Call):
        return True
    if _entries(value):
        return True  # an entry of a container: an object that already existed
    if isinstance(value, ast.IfExp):
        return carries(value.body, fields, aliases, resolve, summaries) and carries(value.orelse, fields, aliases, resolve, summaries)
    got = copy_of(value, aliases, resolve, summaries)
    return got is not None and not (got.given & fields)


# -- aliases -------------------------------------------------------------------------------------------


def aliases_of(node: ast.AST, name: str, skip: ast.AST | None = None) -> set[str]:
    """Names and containers bound to the same object as `name` in a function, in either
    direction: `y = name`, `name = y`, a dict or list whose entries are `name`
    (`{k: name for k in ...}`, `d[k] = name`, `[name] * n`), a name bound to an entry of such a
    container (`y = d[k]`, `y = d.get(k)`, `for y in d.values()`). A container stands for its
    entries: an update through `d[k].f = ...` updates `name`. `skip`: a statement whose own
    binding is left out (is a name bound by it to what it held before?)."""
    links: dict[str, set[str]] = {}
    # a name bound to different objects (`layer_mds = md` and `layer_mds = {}`, `m = a` and
    # `m = b`) is an alias on some paths only: not one
    held_by: dict[str, set[frozenset]] = {}
    for sub in walk_local(node):
        if isinstance(sub, ast.Assign) and sub is not skip:
            for t in sub.targets:
                if isinstance(t, ast.Name):
                    held_by.setdefault(t.id, set()).add(frozenset(_held(sub.value)))
    unstable = {n for n, held in held_by.items() if len(held) > 1 and n != name}

    def link(a: str, b: str) -> None:
        if a != b and a not in unstable and b not in unstable:
            links.setdefault(a, set()).add(b)
            links.setdefault(b, set()).add(a)

    for sub in walk_local(node):
        if sub is skip:
            continue
        if isinstance(sub, ast.Assign):
            for t in sub.targets:
                if isinstance(t, ast.Name):
                    for held in _held(sub.value):
                        link(t.id, held)
                elif isinstance(t, ast.Subscript) and ref(t.value) is not None and ref(sub.value) is not None:
                    link(ref(t.value), ref(sub.value))  # d[k] = x: d holds x
        elif isinstance(sub, (ast.For, ast.AsyncFor)) and isinstance(sub.target, ast.Name):
            for held in _entries(sub.iter):
                link(sub.target.id, held)
        elif isinstance(sub, (ast.For, ast.AsyncFor)) and isinstance(sub.target, ast.Tuple) and len(sub.target.elts) == 2:
            value_target = sub.target.elts[1]
            it = sub.iter
            if isinstance(value_target, ast.Name) and isinstance(it, ast.Call) and last_name(it.func) == "items" and isinstance(it.func, ast.Attribute):
                holder = ref(it.func.value)
                if holder:
                    link(value_target.id, holder)
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in ("update", "setdefault", "append", "extend", "insert"):
            holder = ref(sub.func.value)
            if holder:
                for a in list(sub.args) + [k.value for k in sub.keywords]:
                    for held in _held(a):
                        link(holder, held)
    seen = {name}
    todo = [name]
    while todo:
        cur = todo.pop()
        for nxt in links.get(cur, ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen - {name}


def _held(value: ast.AST) -> list[str]:
    """The names whose object `value` is, or whose objects it holds as entries."""
    spelled = ref(value)
    if spelled is not None:
        return [spelled]
    if isinstance(value, ast.DictComp):
        return _held(value.value)
    if isinstance(value, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        return _held(value.elt)
    if isinstance(value, ast.Dict):
        return [h for v in value.values if v is not None for h in _held(v)]
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        return [h for v in value.elts for h in _held(v)]
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult):
        return _held(value.left) + _held(value.right)
    if isinstance(value, ast.Call) and last_name(value.func) in ("dict", "fromkeys", "list", "tuple"):
        out = []
        for a in value.args[1:] if last_name(value.func) == "fromkeys" else value.args:
            out += _held(a)
        return out
    return _entries(value)


def _entries(value: ast.AST) -> list[str]:
    """The container whose entries an expression reads: `d[k]`, `d.get(k)`, `d.values()`,
    `next(iter(d.values()))`."""
    if isinstance(value, ast.Subscript):
        holder = ref(value.value)
        return [holder] if holder else []
    if isinstance(value, ast.Call):
        name = last_name(value.func)
        if name in ("get", "values", "pop") and isinstance(value.func, ast.Attribute):
            holder = ref(value.func.value)
            return [holder] if holder else []
        if name in ("next", "iter", "list", "tuple") and value.args:
            return _entries(value.args[0])
    return []


# -- functools.partial -------------------------------------------------------------------------------


def partials(node: ast.AST) -> dict[str, ast.Call]:
    """Local names bound once to `functools.partial(f, *args, **kw)` (or `partial(...)`)."""
    out: dict[str, ast.Call] = {}
    for name, value in _single_bindings(node).items():
        if isinstance(value, ast.Call) and last_name(value.func) == "partial" and value.args:
            out[name] = value
    return out


def through_partial(call: ast.Call, bound: dict[str, ast.Call]) -> ast.Call:
    """The call a call of a partial makes: `run()` with `run = partial(self.model, n, md)` is
    `self.model(n, md)`; the original call when it calls no partial."""
    if not (isinstance(call.func, ast.Name) and call.func.id in bound):
        return call
    p = bound[call.func.id]
    made = ast.Call(func=p.args[0], args=list(p.args[1:]) + list(call.args), keywords=list(p.keywords) + list(call.keywords))
    return ast.copy_location(made, call)


# -- containers ----------------------------------------------------------------------------------------


def container_copy_of(value: ast.AST) -> set[str]:
    """The containers a new container takes its entries from: `dict(d)`, `d.copy()`,
    `{**d, **extra}`, `list(d)`, `[*d]`, `copy.copy(d)` (empty when `value` is none of those)."""
    out: set[str] = set()
    if isinstance(value, ast.Dict):
        for key, entry in zip(value.keys, value.values):
            if key is None and ref(entry):
                out.add(ref(entry))  # `**d`
    elif isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        out |= {ref(e.value) for e in value.elts if isinstance(e, ast.Starred) and ref(e.value)}
    elif isinstance(value, ast.Call):
        name = last_name(value.func)
        if name in ("dict", "list", "tuple", "OrderedDict") and value.args and ref(value.args[0]):
            out.add(ref(value.args[0]))
        elif name == "copy" and isinstance(value.func, ast.Attribute) and not value.args and ref(value.func.value) not in ("copy", None):
            out.add(ref(value.func.value))  # `d.copy()`
        elif ref(value.func) in _COPY_CALLS and value.args and ref(value.args[0]):
            out.add(ref(value.args[0]))
    return out


def held_values(value: ast.AST) -> set[str]:
    """The objects a new container holds as its entries, by name: `{name: md for name in
    layers}`, `[md for _ in groups]`, `{"a": md}` (the comprehension's own variables aside:
    those are entries of what it iterates)."""
    out: set[str] = set()
    if isinstance(value, (ast.DictComp, ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        own = {n.id for g in value.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        entry = value.value if isinstance(value, ast.DictComp) else value.elt
        spelled = ref(entry)
        if spelled is not None and spelled.split(".")[0] not in own:
            out.add(spelled)
    elif isinstance(value, ast.Dict):
        out |= {ref(v) for k, v in zip(value.keys, value.values) if k is not None and ref(v)}
    return out


# -- copies made afresh in a loop --------------------------------------------------------------------


def copy_spelled(call: ast.Call) -> bool:
    """A call its name spells as a copy: `copy(x)`, `deepcopy(x)` (also through a module:
    `copy.copy`), `replace(x, ...)` / `x.replace(...)`, `self.shallow_copy*(x)`. Read from the
    name alone, unlike `copy_of` (which resolves the call and names the object copied)."""
    return last_name(call.func) in _COPY_NAMES or (isinstance(call.func, ast.Attribute) and call.func.attr.startswith(_SHALLOW_COPY))


def handed_on(call: ast.Call) -> list[ast.AST]:
    """The values a call may keep or fill a memo on: its arguments, its keywords' values and,
    for a method, the object it is called on (`base.computed()` fills its own memo)."""
    passed = list(call.args) + [k.value for k in call.keywords]
    if isinstance(call.func, ast.Attribute):
        passed.append(call.func.value)
    return passed


def fresh_copy_each_pass(func: ast.AST, loop: ast.AST, name: str, aliases: dict[str, str]) -> bool:
    """`name` is bound, in the loop's body, to a copy of an object the function builds itself
    (`cm_base = Metadata(...)`) and neither the loop nor the code before it writes, rebinds or
    hands to a call (`cm = copy(cm_base)` per group): each pass starts from an object no
    reader has cached anything on, and what one pass caches on its copy is gone on the next."""
    source = (getattr(aliases, "copies", None) or {}).get(name)
    if not source or "." in source:
        return False
    built = [
        n for n in walk_local(func)
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == source for t in n.targets)
    ]
    if len(built) != 1 or not (isinstance(built[0].value, ast.Call) and (last_name(built[0].value.func) or "")[:1].isupper()):
        return False
    for node in walk_local(func):
        if isinstance(node, ast.Call) and built[0].lineno < node.lineno < loop.lineno:
            # `base.computed()` fills its own memo
            if any(isinstance(a, ast.Name) and a.id == source for a in handed_on(node)):
                return False  # handed to a reader before the loop: it may have cached
    bound = False
    for node in ast.walk(loop):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            bound = True
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for piece in ast.walk(t):
                    if isinstance(piece, ast.Name) and piece.id == source and isinstance(piece.ctx, ast.Store):
                        return False
                    if isinstance(piece, ast.Attribute) and isinstance(piece.value, ast.Name) and piece.value.id == source:
                        return False
        elif isinstance(node, ast.Call):
            if not copy_spelled(node) and any(isinstance(a, ast.Name) and a.id == source for a in handed_on(node)):
                return False
    return bound
