"""What a call does to a tensor it is handed: does the function write it in place, and does it
advance it?

`argument_writes(summaries, fn, index)` follows the parameter through the function's body:
in-place operators and methods (`p += k`, `p[:n] = v`, `p.add_(k)`, `p.copy_(v)`,
`p.masked_fill_(...)`, `out=p`), calls that hand it on (to another function of any module,
by position or keyword), a Triton launch (`kernel[grid](..., p, ...)`) and a dispatcher that
names its kernel (`@dispatcher(kernel=k)` over a stub whose parameters are the kernel's). In a
`@triton.jit` kernel a pointer parameter is written by `tl.store(p + i, v)`; the store
advances it when `v` is a load of the same pointer plus a positive amount (`seq_len + 1`,
also through `tl.where` / `tl.minimum`).

The answer is `ADVANCES` (+1), `WRITES` (0: written, direction unknown) or None (not
written, or nothing known). Memoised per summaries, like the other transitive questions.
"""

from __future__ import annotations

import ast
import weakref
from typing import Iterator

from .facts import last_name, ref, walk_local
from .fields import VALUE_AT, VIEW_METHODS, added, rows_added, value_argument
from .project import FunctionInfo
from .summaries import Summaries

ADVANCES = 1
WRITES = 0

_TABLE: "weakref.WeakKeyDictionary[Summaries, dict]" = weakref.WeakKeyDictionary()
_JIT = frozenset({"jit", "autotune", "heuristics"})


def is_kernel(node: ast.AST) -> bool:
    """A `@triton.jit` function (also under `@triton.autotune` / `@triton.heuristics`)."""
    for d in getattr(node, "decorator_list", ()):
        target = d.func if isinstance(d, ast.Call) else d
        if last_name(target) in _JIT:
            return True
    return False


def argument_writes(summaries: Summaries, fn: FunctionInfo, index: int, depth: int = 4) -> int | None:
    table = _TABLE.setdefault(summaries, {})
    key = (str(fn.module.path), fn.qual, index, depth)
    return summaries.project.tracker.memo(table, key, lambda: _writes(summaries, fn, index, depth, set()))


def _writes(summaries: Summaries, fn: FunctionInfo, index: int, depth: int, visiting: set) -> int | None:
    ident = (str(fn.module.path), fn.qual, index)
    if ident in visiting:
        return None
    visiting = visiting | {ident}
    node = fn.node()
    params = fn.facts.params
    if node is None or index >= len(params):
        return None
    name = params[index]
    if is_kernel(node):
        return kernel_writes(node, name)
    kernel = _dispatched_kernel(summaries, fn, node)
    if kernel is not None:
        knode = kernel.node()
        kparams = kernel.facts.params
        if knode is not None and index < len(kparams):
            return kernel_writes(knode, kparams[index])
        return None
    names = _views_of(node, name)
    best: int | None = None
    for got in _own_writes(node, names):
        best = _join(best, got)
        if best == ADVANCES:
            return best
    if depth <= 0:
        return best
    for _call, target, pos in _handed_to(summaries, fn, node, names):
        if target is None:
            continue
        best = _join(best, _writes(summaries, target, pos, depth - 1, visiting))
        if best == ADVANCES:
            return best
    return best


def _handed_to(summaries: Summaries, fn: FunctionInfo, node: ast.AST, names: set[str]) -> Iterator[tuple[ast.Call, FunctionInfo | None, int]]:
    """(call, the function it runs, the index of the parameter given one of `names`) for every
    call of `fn`'s body handed one of them; the function is None where the call cannot be
    resolved, or where it has no parameter of the keyword's name."""
    for call, at in _handed_on(node, names):
        target, offset = _callee(summaries, fn, call)
        if target is None:
            yield call, None, -1
        elif isinstance(at, int):
            yield call, target, at + offset
        elif at in target.facts.params:
            yield call, target, target.facts.params.index(at)
        else:
            yield call, None, -1


def may_write(summaries: Summaries, fn: FunctionInfo, index: int, depth: int = 4) -> bool:
    """Whether `fn` may write the tensor handed to it at `index`: it does (`argument_writes`),
    or it hands the tensor on to a custom operator (`torch.ops.<ns>.<op>(...)`), whose body is
    compiled code that may update its arguments in place (vLLM's `advance_step_flashattn`
    advances the lengths it is given). Asked where a write would bring a field along, never
    where a write would make one stale."""
    if argument_writes(summaries, fn, index, depth) is not None:
        return True
    table = _TABLE.setdefault(summaries, {})
    key = ("custom-op", str(fn.module.path), fn.qual, index, depth)
    return summaries.project.tracker.memo(table, key, lambda: _to_custom_op(summaries, fn, index, depth, set()))


def is_custom_op(call: ast.Call) -> bool:
    return (ref(call.func) or "").startswith("torch.ops.")


def _to_custom_op(summaries: Summaries, fn: FunctionInfo, index: int, depth: int, visiting: set) -> bool:
    ident = (str(fn.module.path), fn.qual, index)
    node = fn.node()
    params = fn.facts.params
    if ident in visiting or node is None or index >= len(params) or depth < 0:
        return False
    visiting = visiting | {ident}
    for call, target, pos in _handed_to(summaries, fn, node, _views_of(node, params[index])):
        if is_custom_op(call):
            return True
        if target is not None and _to_custom_op(summaries, target, pos, depth - 1, visiting):
            return True
    return False


def _join(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _views_of(fn: ast.AST, name: str) -> set[str]:
    """`name` and the locals bound to a view of it (`x = p[:n]`, `x = p.view(-1)`)."""
    out = {name}
    for _ in range(2):
        for sub in walk_local(fn):
            if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
                if _base(sub.value) in out:
                    out.add(sub.targets[0].id)
    return out


def _base(expr: ast.AST) -> str | None:
    for _ in range(4):
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in VIEW_METHODS:
            expr = expr.func.value
        else:
            break
    return expr.id if isinstance(expr, ast.Name) else None


def _own_writes(fn: ast.AST, names: set[str]) -> Iterator[int]:
    for sub in walk_local(fn):
        if isinstance(sub, ast.AugAssign) and _base(sub.target) in names:
            yield ADVANCES if isinstance(sub.op, ast.Add) and _positive(sub.value) else WRITES
        elif isinstance(sub, ast.Assign):
            for t in sub.targets:
                if isinstance(t, ast.Subscript) and _base(t) in names:
                    # `p[idx] = p[idx] + 1`: the rows named advance (not `p[:] = p + k`, as
                    # `fields.store_writes` reads it)
                    rows = isinstance(sub.value, ast.BinOp) and isinstance(sub.value.left, ast.Subscript)
                    yield ADVANCES if rows and _grows(sub.value, names) else WRITES
        elif isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Attribute) and func.attr.endswith("_") and not func.attr.startswith("_") and _base(func.value) in names:
                if func.attr == "add_" and sub.args and _positive(sub.args[0]):
                    yield ADVANCES
                elif (rows := rows_added(sub, func.attr))[0] and _positive_or_none(rows[1]):
                    yield ADVANCES  # `p.index_add_(0, idx, ones)`
                elif func.attr in VALUE_AT and _grows(value_argument(sub, *VALUE_AT[func.attr]), names):
                    yield ADVANCES  # `p.index_copy_(0, idx, p[idx] + 1)`, `p.copy_(p + k)`
                elif func.attr not in ("requires_grad_", "share_memory_", "retain_grad_"):
                    yield WRITES
            for kw in sub.keywords:
                if kw.arg == "out" and _base(kw.value) in names:
                    yield ADVANCES if _out_grows(sub, names) else WRITES


def _out_grows(call: ast.Call, names: set[str]) -> bool:
    """A call writing `out=` one of `names` stores it plus a positive amount:
    `torch.add(p, k, out=p)`, `torch.clamp(p + k, max=m, out=p)` (the cap keeps the
    direction)."""
    if not call.args:
        return False
    if last_name(call.func) == "add" and len(call.args) >= 2 and _base(call.args[0]) in names:
        return _positive(call.args[1])
    return _grows(call.args[0], names)


def _grows(value: ast.AST | None, names: set[str]) -> bool:
    """`value` is (rows of) one of `names` plus a positive amount."""
    if not isinstance(value, ast.BinOp) or not isinstance(value.op, ast.Add):
        return False
    if _base(value.left) in names:
        return _positive(value.right)
    return _base(value.right) in names and _positive(value.left)


def _positive_or_none(amount: ast.AST | None) -> bool:
    return amount is not None and _positive(amount)


def _positive(amount: ast.AST) -> bool:
    # the sign rule every advance is read by (`fields.added`): no zero, no negative literal
    return added(ast.Add(), amount) == 1


def _handed_on(fn: ast.AST, names: set[str]) -> Iterator[tuple[ast.Call, int | str]]:
    """(call, positional index or keyword) for every call given one of `names` (or a view)."""
    for sub in walk_local(fn):
        if not isinstance(sub, ast.Call):
            continue
        for pos, arg in enumerate(sub.args):
            if isinstance(arg, ast.Starred):
                break
            if _base(arg) in names:
                yield sub, pos
        for kw in sub.keywords:
            if kw.arg and kw.arg != "out" and _base(kw.value) in names:
                yield sub, kw.arg


def _callee(summaries: Summaries, fn: FunctionInfo, call: ast.Call) -> tuple[FunctionInfo | None, int]:
    func = call.func
    if isinstance(func, ast.Subscript):
        func = func.value  # `kernel[grid](...)`: a launch
    spelled = ref(func)
    if spelled is None:
        return None, 0
    sym = summaries.resolve(fn, spelled)
    target = summaries.function_for(sym)
    if target is None:
        return None, 0
    params = target.facts.params
    offset = 1 if target.facts.cls is not None and isinstance(func, ast.Attribute) and params[:1] and params[0] in ("self", "cls") else 0
    return target, offset


def _dispatched_kernel(summaries: Summaries, fn: FunctionInfo, node: ast.AST) -> FunctionInfo | None:
    """The kernel a decorator names (`@dispatcher(kernel=k, ...)`): the stub's parameters are
    the kernel's, in order."""
    for d in getattr(node, "decorator_list", ()):
        if not isinstance(d, ast.Call):
            continue
        for kw in d.keywords:
            if kw.arg == "kernel":
                spelled = ref(kw.value)
                if spelled is None:
                    continue
                target = summaries.function_for(summaries.resolve(fn, spelled))
                if target is not None and (target.node() is not None and is_kernel(target.node())):
                    return target
    return None


# -- in a Triton kernel -----------------------------------------------------------------------------


def kernel_writes(kernel: ast.AST, pointer: str) -> int | None:
    """How a `@triton.jit` kernel writes through its pointer parameter `pointer`."""
    values = _bindings(kernel)
    best: int | None = None
    for sub in walk_local(kernel):
        if not (isinstance(sub, ast.Call) and last_name(sub.func) == "store" and sub.args):
            continue
        if _pointer_of(sub.args[0], values, 2) != pointer:
            continue
        value = sub.args[1] if len(sub.args) > 1 else next((k.value for k in sub.keywords if k.arg == "value"), None)
        got = ADVANCES if value is not None and _loaded_plus(value, pointer, values, 4) else WRITES
        best = _join(best, got)
    return best


def _pointer_of(address: ast.AST, values: dict[str, list[ast.AST]], depth: int) -> str | None:
    """The pointer an address starts from: the leftmost term of `p + offsets` (through a
    local bound to such a sum); offsets may name integer parameters, the base is the pointer."""
    while isinstance(address, ast.BinOp) and isinstance(address.op, ast.Add):
        address = address.left
    if isinstance(address, ast.Name):
        bound = values.get(address.id, ())
        if depth > 0 and len(bound) == 1:
            got = _pointer_of(bound[0], values, depth - 1)
            if got is not None:
                return got
        return address.id
    return None


def _bindings(fn: ast.AST) -> dict[str, list[ast.AST]]:
    out: dict[str, list[ast.AST]] = {}
    for sub in walk_local(fn):
        if isinstance(sub, ast.Assign):
            for t in sub.targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(sub.value)
    return out


def _reads_name(expr: ast.AST, name: str, values: dict[str, list[ast.AST]], depth: int) -> bool:
    for part in ast.walk(expr):
        if isinstance(part, ast.Name):
            if part.id == name:
                return True
            if depth > 0 and any(_reads_name(v, name, values, depth - 1) for v in values.get(part.id, ())):
                return True
    return False


def _loaded_plus(value: ast.AST, pointer: str, values: dict[str, list[ast.AST]], depth: int) -> bool:
    """`tl.load(pointer ...) + k` (k > 0), through locals, `tl.where`, `tl.minimum`/`maximum`."""
    if depth < 0:
        return False
    if isinstance(value, ast.Name):
        return any(_loaded_plus(v, pointer, values, depth - 1) for v in values.get(value.id, ()))
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        for side, other in ((value.left, value.right), (value.right, value.left)):
            if _is_load_of(side, pointer, values, depth) and _positive(other):
                return True
    if isinstance(value, ast.Call) and last_name(value.func) in ("where", "minimum", "maximum"):
        return any(_loaded_plus(a, pointer, values, depth - 1) for a in value.args)
    return False


def _is_load_of(expr: ast.AST, pointer: str, values: dict[str, list[ast.AST]], depth: int) -> bool:
    if isinstance(expr, ast.Name) and depth > 0:
        return any(_is_load_of(v, pointer, values, depth - 1) for v in values.get(expr.id, ()))
    return isinstance(expr, ast.Call) and last_name(expr.func) == "load" and bool(expr.args) and _reads_name(expr.args[0], pointer, values, 2)
