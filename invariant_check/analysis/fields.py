"""Writes to fields of objects: which statement or call advances a field, which updates it,
what fields an object is known to have, and where a function's parameter ends up.

Used by the rules about draft-step metadata (IC004, IC005). Everything here is a query over
one function's `ast` plus the project model; nothing is cached beyond the summaries' memos.

- `FieldFlow` is `flow.Flow` with one more kind of event, `store`: an assignment to an
  attribute or to a subscript (`x.a = v`, `x.a += v`, `x.a[:n] += v`, `d[k] = v`), so that
  path questions can ask about field updates as they ask about calls.
- `writes_at(node)` says which fields of which objects an event writes, and in which
  direction (`+` for `x.a += k`, `x.a.add_(k)`, `x.a = x.a + k`, `replace(x, a=x.a + k)`).
- `known_fields(view, obj)`: the fields the class of `obj` declares (dataclass fields,
  members, `self.f = ...` in its methods), or, when its class is unknown, the fields the
  function itself reads or writes on it.
- `flows_to(summaries, fn, index, test)`: whether parameter `index` of `fn` is passed to a
  call that passes `test`, in `fn` or transitively in the functions it passes it to.
- `callers(view, fn)`: the call sites of `fn` in the project, resolved through imports.
"""

from __future__ import annotations

import ast
import bisect
import re
import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterator

from ..globs import name_matcher, required_literals
from .facts import CallFact, annotation_ref, child_nodes, last_name, ref, returns_own_class, target_names, uncapped, walk_local
from .flow import ENTRY, Flow
from .needs import AnyLiteral, Names, Need, PerText, Words
from .objects import bound_value, canonical, carries, copy_of
from .project import ClassInfo, FunctionInfo, Module
from .source import quick_text
from .summaries import Summaries

# -- names ------------------------------------------------------------------------------------


def variants(field: str) -> frozenset[str]:
    """A field and its private backing store: `seq_lens_cpu` is read through the property
    that caches `_seq_lens_cpu`; writing either updates the value callers see."""
    if field.startswith("_"):
        return frozenset({field, field[1:]})
    return frozenset({field, "_" + field})


class Locals(dict):
    """`local_aliases`' answer: name -> dotted value; `values` holds every name bound exactly
    once by a plain assignment, with its expression (`new = cad.seq_lens + 1`); `copies`,
    every such name bound to a copy of another object (`new = copy.copy(md)`: `md`)."""

    values: dict[str, ast.AST]
    _copies: dict[str, str] | None = None
    _find_copies = None

    @property
    def copies(self) -> dict[str, str]:
        # worked out when first asked: resolving the helpers a function calls costs more than
        # the rest of its aliases, and most functions never ask
        if self._copies is None:
            find, self._find_copies = self._find_copies, None
            self._copies = find() if find is not None else {}
        return self._copies

    @copies.setter
    def copies(self, value: dict[str, str]) -> None:
        self._copies = value


def _paired(target: ast.AST, value: ast.AST) -> list[tuple[str, ast.AST]] | None:
    """(name, value) of `a, b = x, y`: names to values of the same length, no starred part."""
    if not (isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))):
        return None
    if len(target.elts) != len(value.elts) or any(isinstance(e, ast.Starred) for e in target.elts + value.elts):
        return None
    if not all(isinstance(e, ast.Name) for e in target.elts):
        return None
    return [(t.id, v) for t, v in zip(target.elts, value.elts)]


def local_aliases(node: ast.AST, view=None) -> Locals:
    """Local names bound exactly once, to a dotted value: `cad = common_attn_metadata`. With
    the function's `view`, copies made by project helpers are resolved too."""
    seen: dict[str, set[str | None]] = {}
    exprs: dict[str, list[ast.AST | None]] = {}
    for sub in walk_local(node):
        if isinstance(sub, ast.Assign):
            for t in sub.targets:
                pairs = _paired(t, sub.value)
                if pairs is not None:
                    # `cad, n = common_attn_metadata, num_reqs`: each name its own value
                    for name, value in pairs:
                        seen.setdefault(name, set()).add(ref(value))
                        exprs.setdefault(name, []).append(value if len(sub.targets) == 1 else None)
                    continue
                for name in target_names(t):
                    seen.setdefault(name, set()).add(ref(sub.value) if isinstance(t, ast.Name) else None)
                    exprs.setdefault(name, []).append(sub.value if isinstance(t, ast.Name) and len(sub.targets) == 1 else None)
        elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)) and isinstance(sub.target, ast.Name):
            value = ref(sub.value) if isinstance(sub, ast.AnnAssign) and sub.value is not None else None
            seen.setdefault(sub.target.id, set()).add(value)
        elif isinstance(sub, (ast.For, ast.AsyncFor, ast.comprehension)):
            for name in target_names(sub.target):
                seen.setdefault(name, set()).add(None)
        elif isinstance(sub, (ast.With, ast.AsyncWith)):
            for item in sub.items:
                if item.optional_vars is not None:
                    for name in target_names(item.optional_vars):
                        seen.setdefault(name, set()).add(None)
        elif isinstance(sub, ast.NamedExpr):
            seen.setdefault(sub.target.id, set()).add(ref(sub.value))
    # a parameter rebound (`md = new_md` at the end of a step) held the caller's object before
    args = getattr(node, "args", None)
    params = {a.arg for a in (args.posonlyargs + args.args + args.kwonlyargs)} if args is not None else set()
    for name in params & set(seen):
        seen[name].add(None)
    out = Locals()
    for name, values in seen.items():
        if len(values) == 1:
            (value,) = values
            if value is not None and value != name and not value.startswith(name + "."):
                out[name] = value
    out.values = {
        name: found[0]
        for name, found in exprs.items()
        if len(found) == 1 and found[0] is not None and len(seen.get(name, ())) == 1
    }
    resolve = (lambda call: resolve_call(view, call)[1]) if view is not None else None
    summaries = view.ctx.summaries() if view is not None else None

    def find() -> dict[str, str]:
        copies: dict[str, str] = {}
        for name, value in out.values.items():
            made = copy_of(value, out, resolve, summaries)
            if made is not None and made.source != name:
                copies[name] = made.source
        return copies

    out._find_copies = find
    return out


def copied_from(name: str, aliases: dict[str, str]) -> str:
    """The object a local copy was made from, through copies of copies (`name` itself when it
    is no copy)."""
    copies = getattr(aliases, "copies", None) or {}
    seen = {name}
    while name in copies and copies[name] not in seen:
        name = copies[name]
        seen.add(name)
    return name


# -- direction of a write -----------------------------------------------------------------------


def _negative(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return not _negative(node.operand)
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool) and node.value < 0


def _zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool)


def added(op: ast.operator, amount: ast.AST) -> int | None:
    """+1 / -1 for `old <op> amount`, None when it is neither an addition nor a subtraction
    (a negative literal flips the sign; adding zero changes nothing)."""
    if _zero(amount):
        return None
    if isinstance(op, ast.Add):
        return -1 if _negative(amount) else 1
    if isinstance(op, ast.Sub):
        return 1 if _negative(amount) else -1
    return None


def _same(node: ast.AST, old: str, aliases: dict[str, str]) -> bool:
    """`node` is `old` itself or a slice of it (`x.a[:n]`), also read from the object a copy
    was made from (`new = copy.copy(md)`: `md.a` is `new.a` until one of them is written)."""
    if isinstance(node, ast.Subscript):
        node = node.value
    spelled = canonical(ref(node), aliases)
    if spelled == old:
        return True
    copies = getattr(aliases, "copies", None)
    if copies and spelled is not None:
        head, _, fld = old.rpartition(".")
        return copies.get(head) is not None and spelled == f"{copies[head]}.{fld}"
    return False


def direction(value: ast.AST | None, old: str, aliases: dict[str, str]) -> int | None:
    """The sign of `value - old` when `value` is `old + k` or `old - k`, also inside a cap
    (`min(old + 1, limit)`, `torch.clamp(old + k, max=...)`); None otherwise."""
    if value is None:
        return None
    if isinstance(value, ast.Name):
        # one step back through a local: `new = cad.seq_lens + 1` then `cad.seq_lens = new`
        value = aliases.values.get(value.id) if isinstance(aliases, Locals) else None
        if value is None or isinstance(value, ast.Name):
            return None
    found: set[int] = set()
    for node in ast.walk(value):
        if not isinstance(node, ast.BinOp):
            continue
        if _same(node.left, old, aliases):
            sign = added(node.op, node.right)
        elif _same(node.right, old, aliases) and isinstance(node.op, ast.Add):
            sign = added(node.op, node.left)
        else:
            continue
        if sign is not None:
            found.add(sign)
    return found.pop() if len(found) == 1 else None


def local_increment(call: ast.Call) -> str | None:
    """The local a call increments in place: `positions.add_(1)` (also of a slice:
    `positions[:n].add_(1)`), `positions.copy_(positions + 1)`, `torch.add(positions, 1,
    out=positions)`; None otherwise."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "add_" and call.args:
        held = func.value.value if isinstance(func.value, ast.Subscript) else func.value
        if isinstance(held, ast.Name):
            return held.id if added(ast.Add(), call.args[0]) == 1 else None
    if isinstance(func, ast.Attribute) and func.attr == "copy_" and isinstance(func.value, ast.Name) and call.args:
        # `positions.copy_(positions + 1)`
        value = call.args[0]
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and isinstance(value.left, ast.Name) and value.left.id == func.value.id:
            return func.value.id if added(ast.Add(), value.right) == 1 else None
        return None
    if last_name(func) == "add" and len(call.args) >= 2:
        out = next((k.value for k in call.keywords if k.arg == "out"), None)
        if isinstance(out, ast.Name) and isinstance(call.args[0], ast.Name) and call.args[0].id == out.id:
            return out.id if added(ast.Add(), call.args[1]) == 1 else None
    return None


# -- the flow with stores -------------------------------------------------------------------------


class FieldFlow(Flow):
    """`Flow` whose events include stores to attributes and subscripts (`kind == "store"`,
    `name` the ref of the target's holder). `targets[index]` is the target node."""

    def __init__(self, func: ast.AST) -> None:
        self.targets: dict[int, ast.AST] = {}
        super().__init__(func)

    def _stmt(self, st: ast.stmt, preds: set[int]) -> set[int]:
        if isinstance(st, ast.Delete):
            # `del md.req_of_token`: the value cached on the object is dropped (how a
            # `functools.cached_property` is reset), a store of the attribute
            for t in st.targets:
                if isinstance(t, ast.Attribute):
                    idx = self._new("store", st, ref(t))
                    self.targets[idx] = t
                    preds = self._chain(preds, idx)
        return super()._stmt(st, preds)

    def _bind_targets(self, target: ast.AST, stmt: ast.AST, preds: set[int]) -> set[int]:
        preds = super()._bind_targets(target, stmt, preds)
        if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            return preds
        for sub in store_targets(target):
            holder = sub.value if isinstance(sub, ast.Subscript) else sub
            idx = self._new("store", stmt, ref(holder))
            self.targets[idx] = sub
            preds = self._chain(preds, idx)
        return preds


def store_targets(target: ast.AST) -> Iterator[ast.AST]:
    """The attribute and subscript stores of an assignment target, through unpacking."""
    if isinstance(target, (ast.Attribute, ast.Subscript)):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from store_targets(elt)
    elif isinstance(target, ast.Starred):
        yield from store_targets(target.value)


# -- what an event writes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldWrite:
    """`obj.field` written by `node`. `kind`: `set` (assigned, updated in place), `new` (a new
    object holding it: `replace(obj, field=...)`, `Cls(field=...)`; `obj` is the object
    copied from, None for a constructor), `copy` (a new object given the old value itself:
    `replace(obj, max_seq_len=obj.max_seq_len)`). `sign`: +1/-1 when the new value is the old
    one plus/minus something."""

    obj: str | None
    field: str
    kind: str
    sign: int | None
    node: ast.AST
    subscript: bool = False


def writes_at(flow: FieldFlow, idx: int, aliases: dict[str, str]) -> list[FieldWrite]:
    node = flow.nodes[idx]
    if node.kind == "store":
        return store_writes(flow.targets[idx], node.node, aliases)
    if node.kind == "call":
        return call_writes(node.node, aliases)
    return []


def _adds_to_rows(value: ast.AST | None) -> bool:
    """`x.a[idx] + k`: a sum whose tensor operand is itself a selection of rows."""
    return isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub)) and (
        isinstance(value.left, ast.Subscript) or isinstance(value.right, ast.Subscript))


def store_writes(target: ast.AST, stmt: ast.AST, aliases: dict[str, str]) -> list[FieldWrite]:
    subscript = isinstance(target, ast.Subscript)
    holder = target.value if subscript else target
    if not isinstance(holder, ast.Attribute):
        return []
    obj = canonical(ref(holder.value), aliases)
    if obj is None:
        return []
    old = f"{obj}.{holder.attr}"
    if isinstance(stmt, ast.AugAssign):
        sign = added(stmt.op, stmt.value)
    elif subscript:
        # `x.a[idx] = x.a[idx] + 1`: the rows named advance; `x.a[i] = v`, and a rewrite of
        # the rows from the whole tensor (`x.a[:] = x.a + k`, a builder's own adjustment):
        # no direction
        value = getattr(stmt, "value", None)
        # (also capped: `x.a[:n] = torch.clamp(x.a[:n] + 1, max=m)`)
        sign = direction(value, old, aliases) if _adds_to_rows(uncapped(value)) else None
    else:
        sign = direction(getattr(stmt, "value", None), old, aliases)
    return [FieldWrite(obj, holder.attr, "set", sign, stmt, subscript)]


# methods that hand the same values on, in another place, device or dtype
_SAME_VALUES = frozenset({"clone", "contiguous", "to", "detach", "cpu", "cuda", "pin_memory", "view", "reshape"})


# methods that return a view of the tensor they are called on: its storage, written through them
VIEW_METHODS = frozenset({"view", "reshape", "flatten", "squeeze", "unsqueeze", "narrow", "select"})


def _stripped(expr: ast.AST, methods: frozenset[str]) -> ast.AST:
    """`expr` without the subscripts and the calls of `methods` around what they are taken
    of: `x.f` for `x.f[:n].to(dev)` (with `to` among `methods`)."""
    while True:
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in methods:
            expr = expr.func.value
        else:
            return expr


def filled_from(write: "FieldWrite", aliases: dict[str, str]) -> str | None:
    """The field of the same object whose values `write` copies into its field as they are:
    `x.f[:n].copy_(x.g[:n])`, `x.f = x.g.to(dev)`, `x.f[:n] = x.g[:n]`. After it, `f` holds
    what `g` holds, so `g`, or a memo `g` is read through, is not stale with respect to `f`
    (a runner refilling its device lengths from its CPU lengths)."""
    node = write.node
    if write.obj is None:
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copy_" and node.args:
        value = node.args[0]
    elif isinstance(node, ast.Assign) and len(node.targets) == 1:
        value = node.value
    else:
        return None
    value = _stripped(value, _SAME_VALUES)
    spelled = canonical(ref(value), aliases) if isinstance(value, ast.Attribute) else None
    if spelled is None:
        return None
    holder, _, field = spelled.rpartition(".")
    return field if holder == write.obj and field != write.field else None


def moves_unchanged(stmt: ast.AST, func: ast.AST, aliases: dict[str, str]) -> bool:
    """`x.f = v` that gives `x.f` the values it already held, in another buffer: `v` a view or
    copy of `x.f` itself (`x.f.clone()`, `x.f.to(dev)`), or a buffer the function filled
    from `x.f` before (`buf[:n].copy_(x.f)` ... `x.f = buf[:n]`, the same spelling, not
    written again in between). Nothing derived from the old values goes stale."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute)):
        return False
    target = stmt.targets[0]
    obj = canonical(ref(target.value), aliases)
    if obj is None:
        return False
    old = f"{obj}.{target.attr}"
    value = stmt.value
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _SAME_VALUES:
        value = value.func.value
    if canonical(ref(value), aliases) == old:
        return True
    spelled = ast.unparse(stmt.value)
    filled_at = None
    for sub in walk_local(func):
        if getattr(sub, "lineno", 0) >= stmt.lineno:
            continue
        if (
            isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "copy_"
            and len(sub.args) == 1 and canonical(ref(sub.args[0]), aliases) == old
            and ast.unparse(sub.func.value) == spelled
        ):
            filled_at = max(filled_at or 0, sub.lineno)
    if filled_at is None:
        return False
    for sub in walk_local(func):
        line = getattr(sub, "lineno", 0)
        if not filled_at < line < stmt.lineno:
            continue
        written = None
        if isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            written = [ast.unparse(t) for t in targets]
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr.endswith("_"):
            written = [ast.unparse(sub.func.value)]
        if written and spelled in written:
            return False
    return True


_INPLACE_SIGN = {"add_": 1, "sub_": -1}
# in-place methods that write given values into (rows of) a tensor: where the value is
# (position, keyword); its direction against the old tensor is the write's
VALUE_AT = {
    "copy_": (0, "src"),
    "index_copy_": (2, "source"),
    "scatter_": (2, "src"),
    "index_put_": (1, "values"),
    "masked_scatter_": (1, "source"),
}
# ... and those that add the given values to rows of it
ROWS_ADDED = {"index_add_": (2, "source"), "scatter_add_": (2, "src")}


def rows_added(call: ast.Call, method: str) -> tuple[bool, ast.AST | None]:
    """(whether `<tensor>.<method>(...)` adds given values to rows of the tensor, the values):
    `index_add_(0, idx, ones)`, `scatter_add_(0, idx, ones)`, and
    `index_put_((idx,), ones, accumulate=True)`."""
    if method in ROWS_ADDED:
        return True, value_argument(call, *ROWS_ADDED[method])
    if method == "index_put_":
        flag = value_argument(call, 2, "accumulate")
        if isinstance(flag, ast.Constant) and flag.value is True:
            return True, value_argument(call, *VALUE_AT[method])
    return False, None


def reads_field(node: ast.AST, field: str) -> bool:
    """`x.field`, or rows of it (`x.field[idx]`)."""
    if isinstance(node, ast.Subscript):
        node = node.value
    return (ref(node) or "").endswith("." + field)


def value_argument(call: ast.Call, position: int, keyword: str) -> ast.AST | None:
    if len(call.args) > position:
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)
_NOT_WRITES = frozenset({"requires_grad_", "share_memory_", "retain_grad_"})


def call_writes(call: ast.Call, aliases: dict[str, str]) -> list[FieldWrite]:
    """Fields a call writes by its own syntax: `x.a.add_(k)` (in place), `replace(x, a=...)`,
    `x.replace(a=...)`, `Cls(a=...)` (new objects)."""
    out: list[FieldWrite] = []
    func = call.func
    name = last_name(func)
    if isinstance(func, ast.Attribute) and func.attr == "pop" and isinstance(func.value, ast.Attribute) and func.value.attr == "__dict__":
        # `md.__dict__.pop("req_of_token", None)`: a `cached_property`'s value dropped
        obj = canonical(ref(func.value.value), aliases)
        if obj is not None and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
            out.append(FieldWrite(obj, call.args[0].value, "set", None, call))
        return out
    if isinstance(func, ast.Name) and func.id == "setattr" and len(call.args) == 3:
        # `setattr(md, "_cache", None)`: a store spelled as a call
        obj = canonical(ref(call.args[0]), aliases)
        attr = call.args[1]
        if obj is not None and isinstance(attr, ast.Constant) and isinstance(attr.value, str):
            out.append(FieldWrite(obj, attr.value, "set", direction(call.args[2], f"{obj}.{attr.value}", aliases), call))
        return out
    sliced = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Subscript) and isinstance(func.value.value, ast.Attribute)
    if isinstance(func, ast.Attribute) and (isinstance(func.value, ast.Attribute) or sliced):
        method = func.attr
        if method.endswith("_") and not method.startswith("_") and method not in _NOT_WRITES:
            # `x.a.add_(k)`, and on a slice of it: `x.a[:n].copy_(v)`
            holder = func.value.value if sliced else func.value
            obj = canonical(ref(holder.value), aliases)
            if obj is not None:
                sign = None
                if method in _INPLACE_SIGN and call.args:
                    base = _INPLACE_SIGN[method]
                    sign = None if _zero(call.args[0]) else (-base if _negative(call.args[0]) else base)
                elif (rows := rows_added(call, method))[0]:
                    # `x.a.index_add_(0, idx, ones)`: the rows named grow by the source
                    source = rows[1]
                    sign = None if source is None or _zero(source) else (-1 if _negative(source) else 1)
                elif method in VALUE_AT:
                    # `x.a.copy_(x.a + 1)`, `x.a.index_copy_(0, idx, x.a[idx] + 1)`: as the value
                    sign = direction(value_argument(call, *VALUE_AT[method]), f"{obj}.{holder.attr}", aliases)
                out.append(FieldWrite(obj, holder.attr, "set", sign, call, sliced))
    if not call.keywords:
        return out
    # `torch.clamp(x.a + 1, max=m, out=x.a)`, `torch.add(x.a, k, out=x.a[:n])`: in place
    for kw in call.keywords:
        if kw.arg != "out":
            continue
        target = kw.value.value if isinstance(kw.value, ast.Subscript) else kw.value
        if not isinstance(target, ast.Attribute):
            continue
        obj = canonical(ref(target.value), aliases)
        if obj is None:
            continue
        old = f"{obj}.{target.attr}"
        sign = None
        if name in ("add", "sub") and len(call.args) >= 2 and _same(call.args[0], old, aliases):
            sign = added(ast.Add() if name == "add" else ast.Sub(), call.args[1])
        elif call.args:
            sign = direction(call.args[0], old, aliases)
        out.append(FieldWrite(obj, target.attr, "set", sign, call, isinstance(kw.value, ast.Subscript)))
    source: str | None = None
    if name == "replace":
        if isinstance(func, ast.Attribute) and ref(func.value) not in ("dataclasses", None):
            source = canonical(ref(func.value), aliases)
        elif call.args:
            source = canonical(ref(call.args[0]), aliases)
    for kw in call.keywords:
        if not kw.arg:
            continue
        value_ref = canonical(ref(kw.value), aliases)
        if source is not None:
            old = f"{source}.{kw.arg}"
            if value_ref is not None and value_ref.rsplit(".", 1)[-1] in variants(kw.arg) | {kw.arg} and value_ref.rpartition(".")[0] == source:
                out.append(FieldWrite(source, kw.arg, "copy", None, call))
            else:
                out.append(FieldWrite(source, kw.arg, "new", direction(kw.value, old, aliases), call))
        else:
            # a constructor: the direction is relative to the object its value reads
            origin = _origin(kw.value, kw.arg, aliases)
            if origin is None:
                continue
            if value_ref == f"{origin}.{kw.arg}" or (value_ref is not None and value_ref.rpartition(".")[0] == origin and value_ref.rsplit(".", 1)[-1] in variants(kw.arg)):
                out.append(FieldWrite(origin, kw.arg, "copy", None, call))
            else:
                out.append(FieldWrite(origin, kw.arg, "new", direction(kw.value, f"{origin}.{kw.arg}", aliases), call))
    return out


def _origin(value: ast.AST, field: str, aliases: dict[str, str]) -> str | None:
    """The object whose own `field` (or its backing store) a keyword's value reads, also
    through a local bound once (`new_lens = old.seq_lens + 1`, then `seq_lens=new_lens`)."""
    if isinstance(value, ast.Name) and isinstance(aliases, Locals):
        value = aliases.values.get(value.id, value)
    for node in ast.walk(value):
        if isinstance(node, ast.Attribute) and node.attr in variants(field) | {field}:
            obj = canonical(ref(node.value), aliases)
            if obj is not None:
                return obj
    return None


# -- fields an object is known to have ------------------------------------------------------------


def class_fields(info: ClassInfo) -> set[str]:
    """The data fields of a class and its resolved bases: dataclass fields, class attributes,
    and the attributes its methods assign on `self`. Methods and properties are not data: a
    property computed on each read cannot be stale (one that caches into `_name` shows up
    through `_name`)."""
    return info.project.tracker.memo(info._memo, "data-fields", lambda: _class_fields(info))


def cached_properties(info: ClassInfo) -> set[str]:
    """The `@functools.cached_property` methods of a class and its bases: each read stores its
    value on the object, as data, until `del obj.name`."""
    return info.project.tracker.memo(info._memo, "cached-properties", lambda: _cached_properties(info))


def _cached_properties(info: ClassInfo) -> set[str]:
    from .derivations import is_cached_property

    out: set[str] = set()
    for cls in info.classes():
        if "cached_property" not in cls.module.source.text:
            continue  # (the decorators are read from the parsed methods: only where it is spelled)
        for name in cls.facts.methods:
            fn = cls.module.function(f"{cls.qual}.{name}")
            node = fn.node() if fn is not None else None
            if node is not None and is_cached_property(node):
                out.add(name)
    return out


def _class_fields(info: ClassInfo) -> set[str]:
    out: set[str] = set(cached_properties(info))
    for cls in info.classes():
        members = cls.own_members()
        methods = set(cls.facts.methods)
        out.update(cls.facts.fields)
        out.update(name for name in members if name not in methods)
        for name in methods:
            method = cls.module.function(f"{cls.qual}.{name}")
            if method is None or not method.facts.params:
                continue
            me = method.facts.params[0]
            out.update(s.attr for s in method.facts.stores if s.target == me)
    return out


def declared_data(info: ClassInfo) -> set[str]:
    """The fields a class and its bases carry as data from step to step: annotated in the
    class body (a dataclass's), and, for a plain class whose `__init__` stores a layout field
    handed to it under its own name (`self.seq_lens = seq_lens`), every attribute its `__init__` sets on `self`.
    A service object allocating its own buffers (`self.seq_lens = torch.zeros(n)`) declares
    nothing by its `__init__`: what it caches for itself is not a metadata object's data. A
    `cached_property`'s value is stored on the object: it is data too."""
    return info.project.tracker.memo(info._memo, "declared-data", lambda: _declared_data(info))


def _declared_data(info: ClassInfo) -> set[str]:
    from .derivations import layout_field

    out: set[str] = set(cached_properties(info))
    for cls in info.classes():
        out.update(cls.facts.fields)
        if "__init__" not in cls.facts.methods:
            continue
        init = cls.module.function(f"{cls.qual}.__init__")
        if init is None or not init.facts.params:
            continue
        me, params = init.facts.params[0], set(init.facts.params[1:])
        own = [s for s in init.facts.stores if s.target == me]
        if any(s.op == "=" and s.value == s.attr and s.attr in params and _layout_data(s.attr, layout_field) for s in own):
            out.update(s.attr for s in own)
    return out


def _layout_data(name: str, layout_field) -> bool:
    # the layout itself (`seq_lens`, `query_start_loc`), not a bound of it handed in as a
    # setting (`max_seq_len`, `num_cache_lens`)
    return layout_field(name) and not name.startswith(("max_", "min_", "num_"))


def handed_attributes(call: ast.Call) -> Iterator[tuple[ast.AST, ast.Attribute]]:
    """(argument, the attribute it spells) for each argument of a call, by position or keyword
    (not `out=`, a write the syntax shows), that is an attribute or a slice of one:
    `f(md.seq_lens)`, `kernel(seq_lens=md.seq_lens[:n])`."""
    for arg in list(call.args) + [k.value for k in call.keywords if k.arg != "out"]:
        base = arg.value if isinstance(arg, ast.Subscript) else arg
        if isinstance(base, ast.Attribute):
            yield arg, base


def class_of(view, obj: str, aliases: dict[str, str], depth: int = 0) -> ClassInfo | None:
    """The class of the object `obj` names in a function: its annotation, the class of
    `self.x`, a local bound to `Cls(...)` or to a copy of another object (`replace(o, ...)`)."""
    if depth > 4:
        return None
    sym = view.resolve(obj)
    if sym.kind == "instance":
        return view.project.class_of(sym)
    if "." in obj:
        return None
    for sub in walk_local(view.node):
        if isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name) and sub.target.id == obj:
            ann = view.resolve(annotation_ref(sub.annotation))
            if ann.kind == "class":
                return view.project.class_of(ann)
        if isinstance(sub, (ast.For, ast.AsyncFor)):
            # `for md in per_layer.values()`, `for name, md in per_layer.items()`
            target, it = sub.target, sub.iter
            if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(it, ast.Call) and last_name(it.func) in ("items", "enumerate"):
                target = target.elts[1]
                if last_name(it.func) == "enumerate" and it.args:
                    it = it.args[0]
            if isinstance(target, ast.Name) and target.id == obj:
                # `for md in group_metadatas` with `group_metadatas: list[Meta]`: an entry
                got = _entry_class(view, it) or _element_class(view, ref(it))
                if got is not None:
                    return got
            continue
        if not (isinstance(sub, ast.Assign) and any(isinstance(t, ast.Name) and t.id == obj for t in sub.targets)):
            continue
        value = sub.value
        entry = _entry_class(view, value)
        if entry is not None:
            return entry
        if isinstance(value, (ast.Name, ast.Attribute)) and ref(value) not in (None, obj):
            # `cad = common_attn_metadata` before `cad = cad.replace(...)` in a loop: the
            # name is bound twice, so no single alias says it
            got = class_of(view, ref(value), aliases, depth + 1)
            if got is not None:
                return got
            continue
        if not isinstance(value, ast.Call):
            continue
        # a copy has the class of what it copies (`copy.copy(md)`, `replace(md, ...)`, a
        # helper returning a copy of its argument)
        made = copy_of(value, aliases, lambda call: resolve_call(view, call)[1], view.ctx.summaries())
        if made is not None:
            if made.source != obj:
                got = class_of(view, made.source, aliases, depth + 1)
                if got is not None:
                    return got
            continue
        callee = view.resolve(ref(value.func))
        if callee.kind == "class":
            return view.project.class_of(callee)
        # a factory whose return annotation names the class (`def make(...) -> Meta:`)
        made_by = resolve_call(view, value)[1]
        node = made_by.node() if made_by is not None else None
        returned = annotation_ref(node.returns) if node is not None and getattr(node, "returns", None) is not None else None
        if returned:
            sym = view.project.resolve(made_by.module, returned, scope=None)
            if sym.kind == "class":
                return view.project.class_of(sym)
        elif node is not None and returns_own_class(node):
            # a classmethod that returns `cls(...)` (`Meta.make(lens)`): its class
            owner = made_by.module.klass(made_by.facts.cls) if made_by.facts.cls else None
            if owner is not None:
                return owner
    return None


def _entry_class(view, expr: ast.AST) -> ClassInfo | None:
    """The class of an entry read from a container parameter annotated with its entries'
    class (`per_layer: dict[str, Metadata]`): `per_layer[k]`, `per_layer.get(k)`,
    `per_layer.values()`, `next(iter(per_layer.values()))`."""
    holder = None
    for _ in range(4):
        if isinstance(expr, ast.Subscript):
            holder = ref(expr.value)
            break
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("get", "values", "items", "pop"):
            holder = ref(expr.func.value)
            break
        if isinstance(expr, ast.Call) and last_name(expr.func) in ("next", "iter", "list", "tuple") and expr.args:
            expr = expr.args[0]
            continue
        return None
    return _element_class(view, holder)


def _element_class(view, holder: str | None) -> ClassInfo | None:
    """The entries' class of a container parameter (`list[Meta]`, `dict[str, Meta]`)."""
    info = view.info
    if holder is None or info is None:
        return None
    element = info.facts.elements.get(holder)
    if element is None:
        return None
    sym = view.resolve(element)
    return view.project.class_of(sym) if sym.kind == "class" else None


def mentioned_fields(node: ast.AST, obj: str, aliases: dict[str, str]) -> set[str]:
    """Fields a function reads or writes on `obj` (also as keywords of a copy of it)."""
    out = set()
    for sub in walk_local(node):
        if isinstance(sub, ast.Attribute) and canonical(ref(sub.value), aliases) == obj:
            out.add(sub.attr)
        elif isinstance(sub, ast.Call) and last_name(sub.func) == "replace":
            for w in call_writes(sub, aliases):
                if w.obj == obj:
                    out.add(w.field)
    return out


# -- calls: their targets, parameters, callers ----------------------------------------------------


def bound_offset(call_func: ast.AST | None, target: FunctionInfo) -> int:
    """1 when a method is called through an instance or class (its first parameter is the
    receiver), else 0."""
    params = target.facts.params
    if target.facts.cls is not None and isinstance(call_func, ast.Attribute) and params[:1] and params[0] in ("self", "cls"):
        return 1
    return 0


def call_argument(call: ast.Call, fn: FunctionInfo, index: int) -> ast.AST | None:
    """What `call` passes for `fn`'s parameter `index`, by position or keyword (not the
    receiver of a bound method); None when it passes nothing there. The inverse of
    `parameter_index`."""
    params = fn.facts.params
    pos = index - bound_offset(call.func, fn)
    if 0 <= pos < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: pos + 1]):
        return call.args[pos]
    for kw in call.keywords:
        if kw.arg == params[index]:
            return kw.value
    return None


def parameter_index(target: FunctionInfo, call: ast.Call, offset: int, argument: Callable[[ast.AST], bool]) -> list[int]:
    """Indices of `target`'s parameters that receive an argument for which `argument` holds."""
    out = []
    params = target.facts.params
    for pos, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if argument(arg) and pos + offset < len(params):
            out.append(pos + offset)
    for kw in call.keywords:
        if kw.arg and argument(kw.value) and kw.arg in params:
            out.append(params.index(kw.arg))
    return out


_FLOWS: "weakref.WeakKeyDictionary[Summaries, dict]" = weakref.WeakKeyDictionary()


def flows_to(summaries: Summaries, fn: FunctionInfo, index: int, test: Callable[[CallFact], bool], key: str, depth: int | None = None) -> bool:
    """Whether parameter `index` of `fn` (or a local alias of it) is passed to a call for
    which `test` holds, or is the receiver of such a call, in `fn` or in the functions it
    passes it to (`depth` calls deep). `key` names the test for memoisation."""
    depth = summaries.depth if depth is None else depth
    table = _FLOWS.setdefault(summaries, {})
    ident = (str(fn.module.path), fn.qual, index, key, depth)
    return summaries.project.tracker.memo(table, ident, lambda: _flows_to(summaries, fn, index, test, depth, set()))


def _flows_to(summaries: Summaries, fn: FunctionInfo, index: int, test, depth: int, visiting: set) -> bool:
    ident = (str(fn.module.path), fn.qual, index)
    if ident in visiting:
        return False
    visiting = visiting | {ident}
    params = fn.facts.params
    if index >= len(params):
        return False
    name = params[index]
    names = {name} | {a for a, v in fn.facts.aliases.items() if v == name}
    for call in fn.facts.calls:
        passed = any(a in names for a in call.args) or any(v in names for v in call.kwargs.values())
        if (passed or call.recv in names) and test(call):
            return True
    if depth <= 0:
        return False
    for callee in summaries.callees(fn):
        target = callee.function
        call = callee.call
        if target is None:
            continue
        tparams = target.facts.params
        offset = 1 if (target.facts.cls is not None and call.recv is not None and tparams[:1] in (["self"], ["cls"])) else 0
        for pos, arg in enumerate(call.args):
            if arg in names and pos + offset < len(tparams) and _flows_to(summaries, target, pos + offset, test, depth - 1, visiting):
                return True
        for kw, arg in call.kwargs.items():
            if arg in names and kw in tparams and _flows_to(summaries, target, tparams.index(kw), test, depth - 1, visiting):
                return True
    return False


_FILLS: "weakref.WeakKeyDictionary[Summaries, dict]" = weakref.WeakKeyDictionary()


def fills(summaries: Summaries, fn: FunctionInfo, index: int, depth: int | None = None) -> bool:
    """Whether `fn` stores into its parameter `index` (`param[key] = value`, a dict of
    per-layer metadata refilled), itself or in a function it passes the parameter to."""
    depth = summaries.depth if depth is None else depth
    table = _FILLS.setdefault(summaries, {})
    ident = (str(fn.module.path), fn.qual, index, depth)
    return summaries.project.tracker.memo(table, ident, lambda: _fills(summaries, fn, index, depth, set()))


def _fills(summaries: Summaries, fn: FunctionInfo, index: int, depth: int, visiting: set) -> bool:
    ident = (str(fn.module.path), fn.qual, index)
    params = fn.facts.params
    if ident in visiting or index >= len(params):
        return False
    visiting = visiting | {ident}
    name = params[index]
    names = {name} | {a for a, v in fn.facts.aliases.items() if v == name}
    node = fn.node()
    if node is not None:
        for sub in walk_local(node):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(sub, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for piece in store_targets(t):
                    if isinstance(piece, ast.Subscript) and isinstance(piece.value, ast.Name) and piece.value.id in names:
                        return True
    if depth <= 0:
        return False
    for callee in summaries.callees(fn):
        target, call = callee.function, callee.call
        if target is None:
            continue
        tparams = target.facts.params
        offset = 1 if (target.facts.cls is not None and call.recv is not None and tparams[:1] in (["self"], ["cls"])) else 0
        for pos, arg in enumerate(call.args):
            if arg in names and pos + offset < len(tparams) and _fills(summaries, target, pos + offset, depth - 1, visiting):
                return True
        for kw, arg in call.kwargs.items():
            if arg in names and kw in tparams and _fills(summaries, target, tparams.index(kw), depth - 1, visiting):
                return True
    return False


def resolve_call(view, call: ast.Call) -> tuple[str, FunctionInfo | None]:
    """(kind of the callee's symbol, the project function it runs, if any); a Triton launch
    `kernel[grid](...)` runs the `@triton.jit` kernel."""
    func = call.func
    launch = isinstance(func, ast.Subscript)
    spelled = ref(func.value if launch else func)
    if spelled is None:
        return "unknown", None
    sym = view.resolve(spelled)
    fn = view.ctx.summaries().function_for(sym)
    if launch:
        from .tensor_writes import is_kernel

        node = fn.node() if fn is not None else None
        if node is None or not is_kernel(node):
            return "unknown", None
    return sym.kind, fn


@dataclass(frozen=True)
class CallSite:
    caller: FunctionInfo
    node: ast.AST  # the caller's def
    call: ast.Call


# the callers of each function, by callee name, per project: (caller, positions of its calls
# of the function) in the order `Project.call_sites` finds them
_CALLERS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def callers(view, fn: FunctionInfo, limit: int = 32) -> list[CallSite]:
    """Call sites of `fn` in the project's functions, found by its name and kept when the call
    resolves to `fn`. The sites of one name are found and resolved once per project, with
    what that read recorded for every function of that name asked about (N functions sharing
    a name cost N lookups, not N scans of its call sites)."""
    project = view.project
    summaries = view.ctx.summaries()
    name = fn.short
    table = _CALLERS.setdefault(project, {})
    by_target = project.tracker.memo(table, name, lambda: _callers_by_target(project, summaries, name))
    out: list[CallSite] = []
    for caller, hits in by_target.get((fn.module.path, fn.qual), ()):
        if caller.qual == fn.qual and caller.module.path == fn.module.path:
            continue
        node = caller.node()
        if node is None:
            continue
        for sub in walk_local(node):
            if isinstance(sub, ast.Call) and (sub.lineno, sub.col_offset) in hits:
                out.append(CallSite(caller, node, sub))
        if len(out) >= limit:
            return out
    return out


def _callers_by_target(project, summaries: Summaries, name: str) -> dict[tuple, list[tuple[FunctionInfo, list[tuple[int, int]]]]]:
    out: dict[tuple, list[tuple[FunctionInfo, list[tuple[int, int]]]]] = {}
    for module, facts, spots in project.call_sites(name):
        caller = FunctionInfo(module, facts)
        hits: dict[tuple, list[tuple[int, int]]] = {}
        for c in spots:
            target = summaries.function_for(summaries.resolve(caller, c.ref))
            if target is not None:
                hits.setdefault((target.module.path, target.qual), []).append((c.line, c.col))
        for key, at in hits.items():
            out.setdefault(key, []).append((caller, at))
    return out


def inherited_callers(fn: FunctionInfo, limit: int = 32) -> list[CallSite]:
    """Where the bases of `fn`'s class call, on `self`, the method `fn` overrides: at run time
    those calls run `fn` (vLLM's `propose()` calling `self._update_...(...)` that a plugin
    overrides). Bases outside the project count (read from the environment or the models)."""
    owner = fn.owner()
    if owner is None:
        return []
    target = f"self.{fn.short}"
    out: list[CallSite] = []
    for base in owner.classes()[1:]:
        module = base.module
        for chunk in module.class_chunks(base.qual):
            for facts in module.chunk_facts(chunk).functions.values():
                if facts.cls != base.qual or not any(c.ref == target for c in facts.calls):
                    continue
                caller = FunctionInfo(module, facts)
                node = caller.node()
                if node is None:
                    continue
                for sub in walk_local(node):
                    if isinstance(sub, ast.Call) and ref(sub.func) == target:
                        out.append(CallSite(caller, node, sub))
                if len(out) >= limit:
                    return out
    return out


# -- steps: the iteration or function a path question is asked in --------------------------------


def step_loop(flow: Flow, idx: int):
    """The innermost loop around event `idx` (one iteration of it is the step), or None. A
    loop that only stores into the entries its own variable indexes (`for i in range(n):
    md.seq_lens[i] += 1`) walks the field's entries: the whole loop is the event, and the
    step is the loop around it."""
    loops = flow.loops_of(idx)
    while loops and _walks_entries(loops[-1].node):
        loops = loops[:-1]
    return loops[-1] if loops else None


def _walks_entries(loop: ast.AST) -> bool:
    if not isinstance(loop, (ast.For, ast.AsyncFor)) or loop.orelse or not loop.body:
        return False
    index = set(target_names(loop.target))
    if not index:
        return False
    for stmt in loop.body:
        if not isinstance(stmt, (ast.Assign, ast.AugAssign)):
            return False
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for t in targets:
            if not (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute)):
                return False
            if not any(isinstance(n, ast.Name) and n.id in index for n in ast.walk(t.slice)):
                return False
        if any(isinstance(n, ast.Call) for n in ast.walk(stmt.value)):
            return False
    return True


def updating_loops(flow: Flow, idx: int, is_update: Callable[[int], bool]) -> set[int]:
    """Heads of the loops that do not contain `idx` and hold an update: entering such a loop
    counts as the update (a loop over the groups that rebuilds each one's metadata; that it
    might run zero times is a property of the data, not of this code)."""
    around = set(flow.nodes[idx].loops)
    out = set()
    for loop in flow.loops:
        if loop.index in around:
            continue
        if any(is_update(m) for m in loop.members):
            out.add(loop.head)
    return out


def parents(func: ast.AST) -> dict[int, ast.AST]:
    """id(node) -> its parent, for every node under `func`."""
    out: dict[int, ast.AST] = {}
    for node in ast.walk(func):
        for child in child_nodes(node):
            out[id(child)] = node
    return out


def statement_of(node: ast.AST, parent: dict[int, ast.AST]) -> ast.stmt | None:
    cur: ast.AST | None = node
    while cur is not None and not isinstance(cur, ast.stmt):
        cur = parent.get(id(cur))
    return cur


# -- is a field updated on every path? ---------------------------------------------------------------

Resolver = Callable[[ast.Call], "FunctionInfo | None"]


def resolver_for(summaries: Summaries, fn: FunctionInfo) -> Resolver:
    """Resolves the calls of `fn` (another function than the one a view is about)."""

    def resolve(call: ast.Call) -> FunctionInfo | None:
        spelled = ref(call.func)
        if spelled is None:
            return None
        return summaries.function_for(summaries.resolve(fn, spelled))

    return resolve


def covered(
    flow: FieldFlow,
    idx: int,
    obj: str,
    field: str,
    aliases: dict[str, str],
    resolve: Resolver,
    summaries: Summaries,
    forward_only: bool = False,
    filled_by_readers: bool = False,
) -> bool:
    """Whether `obj.field` (or its backing store) is written on every path through the step
    of event `idx` (the iteration of its innermost loop, else the function): before it on
    every path into it, or after it on every path out of it. A test of the field's presence
    (`obj.field is not None`) is taken as true: without the field nothing is stale.

    `filled_by_readers`: the field is a memo that the object's readers fill (a builder asking
    `token_to_req_indices()`): an update before the event counts only if the object was not
    handed on in between."""
    names = variants(field)
    memo: dict[int, bool] = {}

    def updates(n: int) -> bool:
        got = memo.get(n)
        if got is None:
            got = memo[n] = updates_at(flow, n, obj, names, aliases, resolve, summaries, summaries.depth)
        return got

    step = step_loop(flow, idx)
    heads = updating_loops(flow, idx, updates)

    def stop(node):
        if step is not None and (node.index == step.head or node.index not in step.members):
            return "end"
        if updates(node.index) or node.index in heads:
            return "fix"
        return None

    def stop_backward(node):
        got = stop(node)
        if got is None and node.index != idx and receives(node, obj, aliases):
            return "end"  # a reader had the object after the update: it may have filled the memo
        return got

    def stop_forward(node):
        # after the advance, the object must not be handed on (to a build, a forward, a
        # helper) before the update: that call reads the stale field
        got = stop(node)
        if got is None and node.index != idx and receives(node, obj, aliases):
            return "read"
        return got

    known = flow.known_at(idx)
    assume = presence(obj, names, aliases)
    after = flow.search(idx, True, stop_forward, known, assume)
    if "end" not in after and "read" not in after:
        return True
    if forward_only:
        return False
    read_after = "read" in after
    back = stop_backward if filled_by_readers else stop

    def stop_back(node):
        got = back(node)
        if got == "fix" and read_after and _built_with(flow, node, obj, names, resolve):
            # an object built before the advance took the field from the values before it,
            # and a call reads it after: the advance made it stale (dead after the advance, a
            # fresh object each pass is fine; one built without the field has nothing stale)
            return "end"
        return got

    return "end" not in flow.search(idx, False, stop_back, known, assume)


def _built_with(flow: FieldFlow, node, obj: str, names: frozenset[str], resolve: Resolver) -> bool:
    """Whether an event binds the name `obj` itself to a construction that gives one of
    `names` a value: a keyword that is not `None`, in the call or in the constructor call a
    factory it calls returns (`make(kv_lens)` returning `Meta(..., max_kv_len=...)`)."""
    if node.kind not in ("bind", "store") or node.name != obj:
        return False
    if node.kind == "store" and isinstance(flow.targets.get(node.index), ast.Subscript):
        return False
    value = bound_value(node.node, obj) if node.kind == "bind" else getattr(node.node, "value", None)
    if not isinstance(value, ast.Call):
        return False
    calls = [value]
    fn = resolve(value)
    fnode = fn.node() if fn is not None else None
    if fnode is not None:
        calls += [r.value for r in walk_local(fnode) if isinstance(r, ast.Return) and isinstance(r.value, ast.Call)]
    return any(
        k.arg in names and not (isinstance(k.value, ast.Constant) and k.value.value is None)
        for call in calls for k in call.keywords
    )


_INSPECTORS = frozenset({"hasattr", "isinstance", "type", "id", "callable"})


def receives(node, obj: str, aliases: dict[str, str]) -> bool:
    """Whether a call event is handed the object `obj` itself (as an argument, a keyword or
    the receiver of one of its methods), not one of its fields."""
    if node.kind != "call":
        return False
    call = node.node
    if isinstance(call.func, ast.Name) and call.func.id in _INSPECTORS:
        return False  # `hasattr(md, "seq_lens_cpu")`: asks about the object, reads no field of it
    spelled = [a.value if isinstance(a, ast.Starred) else a for a in call.args] + [k.value for k in call.keywords]
    if isinstance(call.func, ast.Attribute):
        spelled.append(call.func.value)
    return any(canonical(ref(a), aliases) == obj for a in spelled)


def updates_at(flow: FieldFlow, n: int, obj: str, names: frozenset[str], aliases: dict[str, str],
               resolve: Resolver, summaries: Summaries, depth: int) -> bool:
    """Whether event `n` writes `obj.<one of names>`: a store, an in-place call, a new binding
    of the name, or a call of a project function that writes it on every path."""
    node = flow.nodes[n]
    if node.kind in ("bind", "store") and node.name == obj:
        # the name now holds another object: an update unless that object carries the old
        # values (an alias, a copy that does not set the field anew)
        if node.kind == "store" and isinstance(flow.targets.get(n), ast.Subscript):
            return True  # an entry stored into it
        if isinstance(node.node, (ast.For, ast.AsyncFor, ast.comprehension)):
            return False  # a loop variable holds an entry of what it iterates: old values
        value = bound_value(node.node, obj) if node.kind == "bind" else getattr(node.node, "value", None)
        if isinstance(node.node, ast.AugAssign):
            return True
        return not carries(value, names, aliases, resolve, summaries)
    for w in writes_at(flow, n, aliases):
        if w.obj == obj and w.field in names and w.kind == "set":
            return True
    if node.kind != "call" or depth <= 0:
        return False
    call = node.node
    receiver = canonical(ref(call.func.value), aliases) if isinstance(call.func, ast.Attribute) else None
    passed = receiver == obj or any(
        canonical(ref(a.value if isinstance(a, ast.Starred) else a), aliases) == obj for a in call.args
    ) or any(canonical(ref(k.value), aliases) == obj for k in call.keywords)
    if not passed:
        # a call given the field itself, that may write it in place (a kernel that advances
        # the lengths it is handed, a custom operator): the field is brought along there
        return _field_handed_to_writer(call, obj, names, aliases, resolve, summaries)
    fn = resolve(call)
    if fn is None:
        return False
    offset = bound_offset(call.func, fn)
    indices = parameter_index(fn, call, offset, lambda a: canonical(ref(a), aliases) == obj)
    if offset and isinstance(call.func, ast.Attribute) and canonical(ref(call.func.value), aliases) == obj:
        indices.append(0)
    return any(must_write(summaries, fn, i, names, depth - 1) for i in indices)


def _field_handed_to_writer(call: ast.Call, obj: str, names: frozenset[str], aliases: dict[str, str],
                            resolve: Resolver, summaries: Summaries) -> bool:
    from .tensor_writes import is_custom_op, may_write

    fields = {f"{obj}.{n}" for n in names}

    def is_field(expr: ast.AST) -> bool:
        expr = _stripped(expr, VIEW_METHODS)
        return isinstance(expr, ast.Attribute) and canonical(ref(expr), aliases) in fields

    given = []
    for arg in call.args:
        if isinstance(arg, ast.Starred):
            break
        given.append(arg)
    given += [kw.value for kw in call.keywords if kw.arg]
    if not any(is_field(a) for a in given):
        return False  # asked of every call the object is not handed to: the cheap look first
    if is_custom_op(call):
        return True
    fn = resolve(call)
    if fn is None:
        return False
    return any(may_write(summaries, fn, i) for i in parameter_index(fn, call, bound_offset(call.func, fn), is_field))


_MUST: "weakref.WeakKeyDictionary[Summaries, dict]" = weakref.WeakKeyDictionary()


def must_write(summaries: Summaries, fn: FunctionInfo, index: int, names: frozenset[str], depth: int) -> bool:
    """Whether `fn` writes one of `names` on its parameter `index` on every path from its
    start to its end (through the functions it passes the parameter to, `depth` deep)."""
    table = _MUST.setdefault(summaries, {})
    ident = (str(fn.module.path), fn.qual, index, tuple(sorted(names)), depth)
    return summaries.project.tracker.memo(table, ident, lambda: _must_write(summaries, fn, index, names, depth))


def _must_write(summaries: Summaries, fn: FunctionInfo, index: int, names: frozenset[str], depth: int) -> bool:
    params = fn.facts.params
    node = fn.node()
    if node is None or index >= len(params):
        return False
    obj = params[index]
    flow = FieldFlow(node)
    aliases = local_aliases(node)
    resolve = resolver_for(summaries, fn)

    def stop(n):
        return "fix" if updates_at(flow, n.index, obj, names, aliases, resolve, summaries, depth) else None

    paths = flow.search(ENTRY, True, stop, {}, presence(obj, names, aliases))
    return "end" not in paths and "fix" in paths


def presence(obj: str, names: frozenset[str], aliases: dict[str, str]):
    """A `Flow.search` assumption: tests that the field is there (`obj.f is not None`,
    `obj.f`, `hasattr(obj, "f")`, `"f" in obj.__dict__` for a cached property) hold."""

    def is_field(expr: ast.AST) -> bool:
        # also tested on the object a copy was made from (same value until one is written)
        return isinstance(expr, ast.Attribute) and expr.attr in names and (
            canonical(ref(expr.value), aliases) == obj
            or copied_from(canonical(ref(expr.value), aliases) or "", aliases) == copied_from(obj, aliases)
        )

    def assume(atom) -> bool | None:
        try:
            expr = ast.parse(atom[0], mode="eval").body
        except SyntaxError:
            return None
        if is_field(expr):
            return True
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and is_field(expr.left):
            right = expr.comparators[0]
            if isinstance(right, ast.Constant) and right.value is None:
                if isinstance(expr.ops[0], ast.IsNot):
                    return True
                if isinstance(expr.ops[0], ast.Is):
                    return False
        if (
            isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.ops[0], ast.In)
            and isinstance(expr.left, ast.Constant) and expr.left.value in names
            and isinstance(expr.comparators[0], ast.Attribute) and expr.comparators[0].attr == "__dict__"
            and canonical(ref(expr.comparators[0].value), aliases) == obj
        ):
            return True  # `"name" in md.__dict__`: a `cached_property` holds a value
        if (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Name)
            and expr.func.id == "hasattr"
            and len(expr.args) == 2
            and canonical(ref(expr.args[0]), aliases) == obj
            and isinstance(expr.args[1], ast.Constant)
            and expr.args[1].value in names
        ):
            return True
        return None

    return assume


# -- what a definition must contain (prefilter atoms) -----------------------------------------------


# every in-place method `call_writes` reads a direction from
_INPLACE_MOVES = (*_INPLACE_SIGN, *VALUE_AT, *ROWS_ADDED)


class Moved(Need):
    """An attribute named in `fields` that arithmetic may move: followed (past a subscript
    and closing brackets) by `+`, by `-` and a negative amount, or by `.add_(`, `.sub_(`,
    `.copy_(`, `.index_add_(` and the other in-place writes with a direction; or preceded
    (past a dotted receiver and opening brackets) by `+` or by `add(`/`sub(`. Every advance `writes_at`/`call_writes` recognise (with the amount read
    from the source) is spelled so, on one of its occurrences of the field."""

    cost = 6

    def __init__(self, fields, globs: tuple[str, ...] = ()) -> None:
        self.fields = tuple(fields)
        self.globs = tuple(globs)
        body = "|".join(re.escape(f) for f in sorted(self.fields, key=len, reverse=True))
        self._attr = re.compile(rf"\.(?:\s|\\\n|#[^\n]*\n)*(?:{body})(?![\w])") if body else re.compile(r"(?!)")
        self._globbed = _glob_attributes(self.globs) if self.globs else None
        self._before = re.compile(r"(?:\+|\b(?:add|sub)\s*\()[\s\w.\\(]*\Z")
        self._bytes = AnyLiteral(_literals(self.fields, self.globs))
        self._index = PerText(self._all)

    def quick(self, data: bytes, lower: bytes) -> bool:
        if not self._bytes(data):
            return False
        text = quick_text(data)
        return True if text is None else bool(self._index(text))

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        end = len(text) if end is None else end
        at = self._index(text)
        i = bisect.bisect_left(at, start)
        return i < len(at) and at[i] < end

    def _all(self, text: str) -> list[int]:
        spans = [(m.start(), m.end()) for m in self._attr.finditer(text)]
        if self._globbed is not None:
            spans = sorted(set(spans) | set(self._globbed.spans(text)))
        return [a for a, b in spans if self._moves(text, a, b)]

    def _moves(self, text: str, a: int, b: int) -> bool:
        if self._before.search(text, max(0, a - 300), a):
            return True
        pos = _skip_space(text, b)
        if text.startswith("[", pos):
            pos = _skip_brackets(text, pos)
            if pos < 0:
                return True  # unbalanced within reach: say yes
            pos = _skip_space(text, pos)
        while text.startswith(")", pos):
            pos = _skip_space(text, pos + 1)
        if text.startswith("+", pos):
            return True
        if text.startswith("-", pos):
            nxt = _skip_space(text, pos + 1)
            if text.startswith("=", nxt):
                nxt = _skip_space(text, nxt + 1)
            while text.startswith("(", nxt):
                nxt = _skip_space(text, nxt + 1)
            return text.startswith("-", nxt)
        if text.startswith(".", pos):
            nxt = _skip_space(text, pos + 1)
            return any(text.startswith(m, nxt) for m in _INPLACE_MOVES)
        return False

    def describe(self) -> str:
        return "an attribute " + " | ".join(f"`.{f}`" for f in self.fields + self.globs) + " moved by `+`/`-`/`add_`"


class Stored(Need):
    """An attribute named in `fields` assigned or updated in place (`x.f = v`, `x.f[:n] = v`,
    `x.f += v`, `x.f.copy_(v)` and the other in-place methods): every write `store_writes` /
    `call_writes` see is spelled so."""

    cost = 5

    def __init__(self, fields, globs: tuple[str, ...] = ()) -> None:
        self.fields = tuple(fields)
        self.globs = tuple(globs)
        self._globbed = _glob_attributes(self.globs) if self.globs else None
        body = "|".join(re.escape(f) for f in sorted(self.fields, key=len, reverse=True))
        gap = r"(?:\s|\\\n)*"
        self._written = re.compile(rf"{gap}(?:\[[^\]]*\]{gap})?(?:[-+*/]?=(?!=)|\.{gap}[a-z][a-z_]*_{gap}\()")
        self._rx = re.compile(
            rf"\.{gap}(?:{body}){gap}(?:\[[^\]]*\]{gap})?(?:[-+*/]?=(?!=)|\.{gap}[a-z][a-z_]*_{gap}\()" if body else r"(?!)"
        )
        self._bytes = AnyLiteral(_literals(self.fields, self.globs))

    def quick(self, data: bytes, lower: bytes) -> bool:
        if not self._bytes(data):
            return False
        text = quick_text(data)
        return True if text is None else self.holds(text)

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        end = len(text) if end is None else end
        if self._rx.search(text, start, end) is not None:
            return True
        if self._globbed is not None:
            for a, b in self._globbed.spans(text):
                if start <= a < end and self._written.match(text, b, end):
                    return True
        return False

    def describe(self) -> str:
        return "an attribute " + " | ".join(f"`.{f}`" for f in self.fields + self.globs) + " written"


class _GlobAttributes:
    """Where a text spells an attribute whose name matches identifier globs: (the position of
    its `.`, the end of its name), found from the globs' literals (a glob's longest literal is
    in every name it matches), so a text without them costs one search."""

    def __init__(self, globs: tuple[str, ...]) -> None:
        self.matches = name_matcher(globs, case_sensitive=True)
        lits = {max(required_literals(g), key=len) for g in globs if required_literals(g)}
        # a literal holding another is found wherever that one is: only the minimal ones are
        # searched, each by `str.find` (one regex alternation of them all is several times
        # slower on a large text)
        self._lits = tuple(sorted(x for x in lits if not any(o != x and o in x for o in lits)))
        self._index = PerText(self._compute)

    def spans(self, text: str) -> list[tuple[int, int]]:
        return self._index(text) if self._lits else []

    def _compute(self, text: str) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        seen: set[int] = set()
        for lit in self._lits:
            pos = text.find(lit)
            while pos >= 0:
                a = pos
                while a > 0 and (text[a - 1].isalnum() or text[a - 1] == "_"):
                    a -= 1
                m_end = _WORD_END.match(text, pos + len(lit))
                b = m_end.end() if m_end else pos + len(lit)
                pos = text.find(lit, b)
                if a in seen:
                    continue
                seen.add(a)
                if not self.matches(text[a:b]):
                    continue
                dot = a - 1
                while dot >= 0 and text[dot] in " \t\n\\":
                    dot -= 1
                if dot >= 0 and text[dot] == ".":
                    out.append((dot, b))
        out.sort()
        return out


_WORD_END = re.compile(r"\w*")


@lru_cache(maxsize=None)
def _glob_attributes(globs: tuple[str, ...]) -> _GlobAttributes:
    """One index per set of globs: the needs that ask about the same globs (an advance, a
    store) share its answers for a text."""
    return _GlobAttributes(globs)


def _literals(fields: tuple[str, ...], globs: tuple[str, ...]) -> list[bytes]:
    """The bytes one of which a text must hold: each name, and each glob's longest literal."""
    out = [f.encode() for f in fields]
    for g in globs:
        runs = required_literals(g)
        out.append(max(runs, key=len).encode() if runs else b"")
    return out


class Passed(Need):
    """A name matching `names` (the last part of a dotted ref) where an argument starts:
    after `(`, `,`, `=` or `*` (past a dotted receiver, blanks, comments). `attribute`: only
    as an attribute of something (`f(md.seq_lens)`, `f(x.bufs[i].seq_lens)`), never a bare
    name (`f(seq_lens)`)."""

    cost = 6

    def __init__(self, names: Names, attribute: bool = False) -> None:
        self.names = names
        self.attribute = attribute
        gap = r"(?:\s|\\\n|#[^\n]*\n)*"
        if attribute:
            # any receiver without a call's parenthesis or an argument's separator in it
            self._before = re.compile(rf"[(,=*]{gap}[^(),=]*\.(?:\s|\\\n)*\Z")
        else:
            self._before = re.compile(rf"[(,=*]{gap}(?:\w+(?:\s|\\\n)*\.(?:\s|\\\n)*)*\Z")
    def quick(self, data: bytes, lower: bytes) -> bool:
        if not self.names.quick(data, lower):
            return False
        text = quick_text(data)
        return True if text is None else self.holds(text)

    def holds(self, text: str, start: int = 0, end: int | None = None) -> bool:
        for a, _b in self.names.occurrences(text, start, end):
            if self._before.search(text, max(0, a - 300), a):
                return True
        return False

    def describe(self) -> str:
        return f"{self.names.describe()} passed as an argument" + (" (as `x.name`)" if self.attribute else "")


def _skip_space(text: str, pos: int) -> int:
    n = len(text)
    while pos < n:
        c = text[pos]
        if c in " \t\r\n\f\\":
            pos += 1
        elif c == "#":
            nl = text.find("\n", pos)
            pos = n if nl < 0 else nl + 1
        else:
            break
    return pos


def _skip_brackets(text: str, pos: int, reach: int = 2000) -> int:
    """Past the bracket group opening at `pos`; -1 if it does not close within `reach`."""
    depth = 0
    stop = min(len(text), pos + reach)
    while pos < stop:
        c = text[pos]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return pos + 1
        pos += 1
    return -1
