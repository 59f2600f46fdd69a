"""In-place gathers of a tensor's rows, and which object a local name holds, as queries over
one function's `ast`.

A *gather in place* writes rows of a tensor, read at an index, over the front of the same
tensor (the compaction of a shared top-k buffer written out):

| the rows written (a view of `T`)    | the rows read (of `T`, at an index)                         |
|-------------------------------------|-------------------------------------------------------------|
| `T[:n] = ...`                       | `T[idx]`, `T[idx, :]`                                       |
| `T[:n].copy_(...)`                  | `T.index_select(0, idx)`, `torch.index_select(T, 0, idx)`   |
| `T.narrow(0, 0, n).copy_(...)`      | `T.gather(0, idx)`, `torch.gather(T, 0, idx)`               |
| `T.index_copy_(0, rows, ...)`       | `torch.take_along_dim(T, idx, 0)`                           |
| `torch.index_select(T, 0, idx, out=T[:n])` (also `torch.gather`, `take_along_dim`)  |  |

The rows read may pass through `.clone()`, `.contiguous()`, `.to(...)`, and through a local
bound once to them (`rows = T[idx]`, then `T[:n] = rows`).

*Which object a local name holds* (`LocalValues.holders`) follows its bindings, whichever
runs: another name or attribute (`buf = layer.indexer.topk_indices_buffer`,
`getattr(layer, "topk_indices_buffer", None)`, `:=`), a view of one (`buf[:n]`,
`buf.narrow(...)`, `.view(...)`, `.detach()`, `.contiguous()`), an entry of a container of
them read back (`{b.data_ptr(): b for ...}` then `for buf in d.values()`, `[a, b]`, `d[k] = b`,
`seen.append(b)`), or a new object (`.clone()`, `torch.clone(x)`, `copy.deepcopy(x)`,
`x[idx]`, `torch.empty_like(x)`): a copy, whose rows no one else reads. A gather counts for
the objects its tensor may be, never for a copy: `tmp = buf.clone(); tmp[:n] = tmp[idx]`
compacts nothing shared.
"""

from __future__ import annotations

import ast
from typing import Iterator

from .facts import FUNCS, last_name, ref, target_names, walk_local

NEW = "<new>"  # a new object (a copy): no shared buffer
UNKNOWN = "<unknown>"  # nothing tells what the name holds
# what a call of another function yields or returns, as entries: `<entries of f>` for `for
# buf in f(model)` (the project answers what `f` yields: `handed_out`)
ENTRIES_OF = "<entries of "
VALUE_OF = "<value of "  # what a call returns: `buf = self._topk_buffer(layer)`
DEPTH = 8

# methods that return the tensor itself or a view of its storage: a write through the result
# writes the tensor
_VIEWS = frozenset({
    "narrow", "view", "view_as", "detach", "squeeze", "unsqueeze", "flatten", "reshape", "contiguous",
    "to", "transpose", "permute", "expand", "expand_as", "select", "as_strided", "unflatten", "t",
})
# calls that make a new tensor or object
_COPY_METHODS = frozenset({"clone", "cpu", "numpy", "tolist", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor"})
_COPY_FUNCTIONS = frozenset({
    "clone", "copy", "deepcopy", "empty", "zeros", "ones", "full", "tensor", "cat", "concat", "stack", "arange",
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
})
# calls whose result is rows of their first tensor read at an index (a copy)
_ROW_READS = frozenset({"index_select", "gather", "take_along_dim"})
_PASS_THROUGH = frozenset({"clone", "contiguous", "to", "detach"})  # the rows read, still


def held_ref(expr: ast.AST | None) -> str | None:
    """The dotted ref an expression names: `a.b`, also `getattr(a, "b")` and
    `getattr(a, "b", default)` with a literal name."""
    r = ref(expr)
    if r is not None:
        return r
    if (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr"
        and 2 <= len(expr.args) <= 3 and not expr.keywords
        and isinstance(expr.args[1], ast.Constant) and isinstance(expr.args[1].value, str)
        and expr.args[1].value.isidentifier()
    ):
        owner = held_ref(expr.args[0])
        return f"{owner}.{expr.args[1].value}" if owner else None
    return None


def _basic_index(index: ast.AST) -> bool:
    """An index that selects a view (slices, constants), not rows by an index tensor."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    return all(isinstance(p, (ast.Slice, ast.Constant)) for p in parts)


def view_base(expr: ast.AST) -> ast.AST | None:
    """The tensor `expr` is a view of (or is): `T` of `T[:n]`, `T.narrow(0, 0, n)`,
    `T.view(-1)`, `T.detach()`; None when `expr` makes no view."""
    if isinstance(expr, ast.Subscript) and _basic_index(expr.slice):
        return expr.value
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _VIEWS:
        return expr.func.value
    if isinstance(expr, ast.Attribute) and expr.attr in ("T", "data"):
        return expr.value
    return None


def makes_copy(expr: ast.AST) -> bool:
    """Whether `expr` makes a new object from others (`x.clone()`, `torch.clone(x)`,
    `copy.deepcopy(x)`, `x[idx]`, `x.index_select(...)`, `torch.empty_like(x)`)."""
    if isinstance(expr, ast.Subscript):
        return not _basic_index(expr.slice)
    if not isinstance(expr, ast.Call):
        return False
    name = last_name(expr.func)
    if isinstance(expr.func, ast.Attribute) and ref(expr.func.value) not in ("torch", "copy", None):
        return name in _COPY_METHODS or name in _ROW_READS
    return name in _COPY_FUNCTIONS or name in _ROW_READS


class LocalValues:
    """The bindings of one function's local names, flow-insensitively: every value each name
    is bound to somewhere, and the entries put into each local container."""

    def __init__(self, func: ast.AST) -> None:
        self.func = func
        args = getattr(func, "args", None)
        self.params: set[str] = set()
        if isinstance(args, ast.arguments):
            every = args.posonlyargs + args.args + args.kwonlyargs
            self.params = {a.arg for a in every} | {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        # name -> [('value', expr) | ('entry', iterable) | ('item', iterable, position) | ('other', None)]
        self.bindings: dict[str, list[tuple]] = {}
        self.added: dict[str, list[ast.AST]] = {}  # container name -> entries put into it
        for sub in walk_local(func):
            self._visit(sub)

    def _bind(self, name: str, how: tuple) -> None:
        self.bindings.setdefault(name, []).append(how)

    def _target(self, target: ast.AST, how: tuple) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id, how)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and how[0] == "value":
            self.added.setdefault(target.value.id, []).append(how[1])  # d[k] = x
        elif isinstance(target, (ast.Tuple, ast.List)):
            for name in target_names(target):
                self._bind(name, ("other", None))

    def _visit(self, sub: ast.AST) -> None:
        if isinstance(sub, ast.Assign):
            for t in sub.targets:
                if isinstance(t, (ast.Tuple, ast.List)) and isinstance(sub.value, (ast.Tuple, ast.List)) and len(t.elts) == len(sub.value.elts):
                    for elt, value in zip(t.elts, sub.value.elts):
                        self._target(elt, ("value", value))
                else:
                    self._target(t, ("value", sub.value))
        elif isinstance(sub, ast.AnnAssign) and sub.value is not None:
            self._target(sub.target, ("value", sub.value))
        elif isinstance(sub, ast.NamedExpr):
            self._bind(sub.target.id, ("value", sub.value))
        elif isinstance(sub, (ast.For, ast.AsyncFor, ast.comprehension)):
            self._loop_target(sub.target, sub.iter)
        elif isinstance(sub, (ast.With, ast.AsyncWith)):
            for item in sub.items:
                if item.optional_vars is not None:
                    for name in target_names(item.optional_vars):
                        self._bind(name, ("other", None))
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            for alias in sub.names:
                self._bind((alias.asname or alias.name).split(".")[0], ("other", None))
        elif isinstance(sub, (*FUNCS, ast.ClassDef)):
            self._bind(sub.name, ("other", None))
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and isinstance(sub.func.value, ast.Name):
            holder, method = sub.func.value.id, sub.func.attr
            if method in ("append", "add") and len(sub.args) == 1:
                self.added.setdefault(holder, []).append(sub.args[0])
            elif method == "insert" and len(sub.args) == 2:
                self.added.setdefault(holder, []).append(sub.args[1])
            elif method == "setdefault" and len(sub.args) == 2:
                self.added.setdefault(holder, []).append(sub.args[1])

    def _loop_target(self, target: ast.AST, it: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id, ("entry", it))
            return
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(it, ast.Call):
            name = last_name(it.func)
            for pos, elt in enumerate(target.elts):
                if not isinstance(elt, ast.Name):
                    for n in target_names(elt):
                        self._bind(n, ("other", None))
                    continue
                if name == "items" and isinstance(it.func, ast.Attribute) and not it.args and pos == 1:
                    self._bind(elt.id, ("values", it.func.value))
                elif name == "enumerate" and it.args and pos == 1:
                    self._bind(elt.id, ("entry", it.args[0]))
                elif name == "zip" and pos < len(it.args):
                    self._bind(elt.id, ("entry", it.args[pos]))
                else:
                    self._bind(elt.id, ("other", None))
            return
        for n in target_names(target):
            self._bind(n, ("other", None))

    # -- what a name holds ---------------------------------------------------------------------
    def holders(self, spelled: str) -> set[str]:
        """The refs of the objects a dotted ref may name, through the local names it starts
        with: `{"layer.indexer.topk_indices_buffer"}` for `buf` bound to that; `NEW` for a copy,
        and the ref itself where its local's bindings tell nothing."""
        got = self._through_locals(spelled, DEPTH, frozenset())
        return got or {spelled}

    def _through_locals(self, spelled: str, depth: int, seen: frozenset) -> set[str]:
        head, dot, rest = spelled.partition(".")
        hows = self.bindings.get(head)
        if not hows:
            return {spelled}  # a parameter, `self`, a global: itself
        if head in seen:
            return set()  # a cycle: the other bindings answer
        if depth <= 0:
            return {spelled}
        out: set[str] = set()
        inner = seen | {head}
        if head in self.params:
            out.add(spelled)  # the parameter's own value, before a rebinding
        for how in hows:
            if how[0] == "value":
                got = self._sources(how[1], depth - 1, inner)
            elif how[0] == "entry":
                got = self._entries(how[1], depth - 1, inner)
            elif how[0] == "values":
                got = self._contents(how[1], depth - 1, inner)
            else:
                got = {UNKNOWN}
            for g in got:
                if g == UNKNOWN:
                    out.add(spelled)
                elif g == NEW:
                    out.add(NEW)
                else:
                    out.add(g + dot + rest)
        return out

    def _sources(self, expr: ast.AST, depth: int, seen: frozenset) -> set[str]:
        """The objects an expression's value may be."""
        if depth <= 0:
            return {UNKNOWN}
        r = held_ref(expr)
        if r is not None:
            return self._through_locals(r, depth, seen)
        if isinstance(expr, ast.IfExp):
            return self._sources(expr.body, depth - 1, seen) | self._sources(expr.orelse, depth - 1, seen)
        if isinstance(expr, ast.BoolOp):
            out: set[str] = set()
            for v in expr.values:
                out |= self._sources(v, depth - 1, seen)
            return out
        if isinstance(expr, ast.NamedExpr):
            return self._sources(expr.value, depth - 1, seen)
        base = view_base(expr)
        if base is not None:
            return self._sources(base, depth - 1, seen)
        if makes_copy(expr):
            return {NEW}
        if isinstance(expr, ast.Call) and (func := ref(expr.func)) is not None:
            return {UNKNOWN, f"{VALUE_OF}{func}>"}
        return {UNKNOWN}

    def _entries(self, it: ast.AST, depth: int, seen: frozenset) -> set[str]:
        """The objects iterating `it` yields."""
        if depth <= 0:
            return {UNKNOWN}
        if isinstance(it, (ast.List, ast.Tuple, ast.Set)):
            out: set[str] = set()
            for e in it.elts:
                out |= self._entries(e.value, depth - 1, seen) if isinstance(e, ast.Starred) else self._sources(e, depth - 1, seen)
            return out
        if isinstance(it, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self._sources(it.elt, depth - 1, seen)
        if isinstance(it, ast.Call):
            name = last_name(it.func)
            if name == "values" and isinstance(it.func, ast.Attribute) and not it.args:
                return self._contents(it.func.value, depth - 1, seen)
            if isinstance(it.func, ast.Name) and name in ("list", "tuple", "set", "sorted", "reversed", "iter", "frozenset") and it.args:
                return self._entries(it.args[0], depth - 1, seen)
            return _made_by(it)
        if isinstance(it, ast.Name) and it.id in self.bindings:
            return self._contents(it, depth - 1, seen)
        return {UNKNOWN}

    def _contents(self, container: ast.AST, depth: int, seen: frozenset) -> set[str]:
        """The objects a local container holds as entries (values, for a dict)."""
        if not isinstance(container, ast.Name) or container.id not in self.bindings or container.id in seen or depth <= 0:
            if isinstance(container, (ast.Dict, ast.DictComp)):
                return self._made(container, depth, seen)
            return {UNKNOWN}
        name = container.id
        inner = seen | {name}
        out: set[str] = set()
        for how in self.bindings[name]:
            if how[0] != "value":
                out.add(UNKNOWN)
                continue
            out |= self._made(how[1], depth - 1, inner)
        for entry in self.added.get(name, []):
            out |= self._sources(entry, depth - 1, inner)
        return out  # empty: only itself (a cycle), or nothing put in

    def _made(self, value: ast.AST, depth: int, seen: frozenset) -> set[str]:
        """The entries of a container an expression makes."""
        if isinstance(value, ast.Dict):
            out: set[str] = set()
            for k, v in zip(value.keys, value.values):
                out |= self._contents(v, depth - 1, seen) if k is None else self._sources(v, depth - 1, seen)
            return out
        if isinstance(value, ast.DictComp):
            return self._sources(value.value, depth - 1, seen)
        if isinstance(value, (ast.List, ast.Tuple, ast.Set, ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self._entries(value, depth - 1, seen) if not (isinstance(value, (ast.List, ast.Tuple, ast.Set)) and not value.elts) else set()
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("list", "tuple", "set", "dict", "frozenset", "OrderedDict"):
            if not value.args:
                return set()  # an empty container, filled later
            if value.func.id in ("dict", "OrderedDict"):
                return self._contents(value.args[0], depth - 1, seen)
            return self._entries(value.args[0], depth - 1, seen)
        if isinstance(value, ast.Name):
            return self._contents(value, depth - 1, seen)
        if isinstance(value, ast.Call):
            return _made_by(value)  # `bufs = collect_buffers(model)`, then `for buf in bufs`
        return {UNKNOWN}

    # -- rows read -----------------------------------------------------------------------------
    def rows_read(self, expr: ast.AST, depth: int = 4) -> ast.AST | None:
        """The tensor whose rows `expr` reads at an index (`T[idx]`, `T.index_select(0, idx)`,
        `torch.gather(T, 0, idx)`, through `.clone()`, `.contiguous()` and a local bound once
        to such rows); None otherwise."""
        if depth <= 0:
            return None
        if isinstance(expr, ast.Subscript):
            return None if _basic_index(expr.slice) else expr.value
        if isinstance(expr, ast.Name):
            hows = self.bindings.get(expr.id) or []
            if len(hows) == 1 and hows[0][0] == "value" and expr.id not in self.params:
                return self.rows_read(hows[0][1], depth - 1)
            return None
        if not isinstance(expr, ast.Call):
            return None
        name = last_name(expr.func)
        if isinstance(expr.func, ast.Attribute) and name in _PASS_THROUGH:
            return self.rows_read(expr.func.value, depth - 1)
        if name in _ROW_READS:
            on = expr.func.value if isinstance(expr.func, ast.Attribute) else None
            if on is not None and ref(on) != "torch":
                return on
            return expr.args[0] if expr.args else None
        return None

    def same_object(self, a: ast.AST | None, b: ast.AST | None) -> bool:
        """Whether two expressions name the same tensor: the same spelling, or locals that
        hold the same object."""
        ra, rb = held_ref(a), held_ref(b)
        if ra is None or rb is None:
            return False
        if ra == rb:
            return True
        # two calls of one function need not return one object
        ha = {h for h in self.holders(ra) if not h.startswith("<")}
        hb = {h for h in self.holders(rb) if not h.startswith("<")}
        return bool(ha & hb)


def _made_by(call: ast.Call) -> set[str]:
    """The entries of what a call returns: unknown here, and named after the function called
    (`ENTRIES_OF`) for the project to answer; a method of a tensor (`buf.split(k)`) makes
    views the project does not define."""
    func = ref(call.func)
    if func is None or isinstance(call.func, ast.Attribute) and last_name(call.func) in _VIEWS | {"split", "chunk", "unbind"}:
        return {UNKNOWN}
    return {UNKNOWN, f"{ENTRIES_OF}{func}>"}


def made_by_call(held: str) -> tuple[str, str, str] | None:
    """(`ENTRIES_OF` or `VALUE_OF`, the function, the rest of the ref) of a ref into what a
    call returned (`<entries of f>.data` -> `(ENTRIES_OF, "f", ".data")`); None for any other
    ref."""
    for kind in (ENTRIES_OF, VALUE_OF):
        if held.startswith(kind):
            func, _, rest = held[len(kind) :].partition(">")
            return kind, func, rest
    return None


def handed_out(func: ast.AST, kind: str) -> set[str]:
    """The objects a function hands out, as dotted refs through its locals (copies and what
    cannot be told left out): with `VALUE_OF`, what it returns (`return
    layer.indexer.topk_indices_buffer`); with `ENTRIES_OF`, what it yields (`yield buf`,
    `yield from bufs`) and the entries of what it returns (`return [l.indexer.topk_indices_buffer
    for l in layers]`, a list it fills)."""
    values = LocalValues(func)
    entries = kind == ENTRIES_OF
    out: set[str] = set()
    for sub in walk_local(func):
        if isinstance(sub, ast.Return) and sub.value is not None:
            out |= (values._entries if entries else values._sources)(sub.value, DEPTH, frozenset())
        elif entries and isinstance(sub, ast.Yield) and sub.value is not None:
            out |= values._sources(sub.value, DEPTH, frozenset())
        elif entries and isinstance(sub, ast.YieldFrom):
            out |= values._entries(sub.value, DEPTH, frozenset())
    return {h for h in out if not h.startswith("<")}


def _gather_parts(node: ast.AST) -> tuple[ast.AST, ast.AST] | None:
    """(the rows written, the rows read) of a statement or call that may gather in place."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        return node.targets[0], node.value
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "copy_" and node.args:
        return func.value, node.args[0]
    if isinstance(func, ast.Attribute) and func.attr == "index_copy_" and len(node.args) >= 3:
        return ast.Subscript(value=func.value, slice=node.args[1], ctx=ast.Store()), node.args[2]
    if last_name(func) in _ROW_READS:
        out = next((k.value for k in node.keywords if k.arg == "out"), None)
        if out is not None:
            value = ast.Call(func=func, args=node.args, keywords=[k for k in node.keywords if k.arg != "out"])
            return out, value
    return None


def _written(dest: ast.AST) -> ast.AST | None:
    """The tensor whose rows a write target covers: `T` of `T[:n]`, `T.narrow(0, 0, n)`,
    `T[:n].view(-1)`; a whole tensor (`T.copy_(...)`) is no gather of rows."""
    if isinstance(dest, ast.Subscript):
        return dest.value
    if isinstance(dest, ast.Call) and isinstance(dest.func, ast.Attribute) and dest.func.attr == "narrow":
        return dest.func.value
    if isinstance(dest, ast.Call) and isinstance(dest.func, ast.Attribute) and dest.func.attr in _VIEWS:
        return _written(dest.func.value)
    return None


def gathered(node: ast.AST, values: LocalValues | None = None) -> str | None:
    """The ref (as spelled) of the tensor whose rows `node` gathers in place, else None."""
    parts = _gather_parts(node)
    if parts is None:
        return None
    dest, value = parts
    tensor = _written(dest)
    if tensor is None or held_ref(tensor) is None:
        return None
    values = values if values is not None else _NO_LOCALS
    read = values.rows_read(value)
    if read is None:
        return None
    if held_ref(read) == held_ref(tensor) or values is not _NO_LOCALS and values.same_object(read, tensor):
        return held_ref(tensor)
    return None


_NO_LOCALS = LocalValues(ast.Pass())


def may_gather(node: ast.AST) -> bool:
    """Whether a node has the shape of a write of rows (cheap: the candidates of `gathers_in`):
    the rows written are a slice or a narrowed view of a tensor (`T[:n]`, `T[a:b, :]`,
    `T.narrow(...)`) or named by `index_copy_`, not a key of a mapping (`d[k] = v`)."""
    parts = _gather_parts(node)
    if parts is None:
        return False
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "index_copy_":
        return True
    return _sliced(parts[0])


def _sliced(dest: ast.AST) -> bool:
    if isinstance(dest, ast.Subscript):
        index = dest.slice
        return isinstance(index, ast.Slice) or isinstance(index, ast.Tuple) and any(isinstance(e, ast.Slice) for e in index.elts)
    if isinstance(dest, ast.Call) and isinstance(dest.func, ast.Attribute):
        return dest.func.attr == "narrow" or dest.func.attr in _VIEWS and _sliced(dest.func.value)
    return False


def gathers_in(func: ast.AST, candidates: list[ast.AST] | None = None) -> dict[int, tuple[str, ...]]:
    """`id(node)` of every statement or call of a function that gathers a tensor's rows in
    place -> the refs of the objects that tensor may be (see `LocalValues.holders`); empty
    for a gather into a copy. Nested functions are theirs. `candidates`: the nodes of the
    function that `may_gather`, when the caller has them."""
    if candidates is None:
        candidates = [sub for sub in walk_local(func) if may_gather(sub)]
    if not candidates:
        return {}
    values: LocalValues | None = None
    out: dict[int, tuple[str, ...]] = {}
    for sub in candidates:
        # the spelling alone decides most (`buf[:n] = buf[idx]`); locals only when needed
        spelled = gathered(sub)
        if spelled is None:
            values = values or LocalValues(func)
            spelled = gathered(sub, values)
            if spelled is None:
                continue
        values = values or LocalValues(func)
        held = values.holders(spelled)
        out[id(sub)] = tuple(sorted(h for h in held if h != NEW))
    return out


def iter_gathers(func: ast.AST) -> Iterator[str]:
    """The refs of the objects whose rows a function gathers in place, each once."""
    seen: dict[str, None] = {}
    for refs in gathers_in(func).values():
        for r in refs:
            seen.setdefault(r, None)
    return iter(seen)


__all__ = ["ENTRIES_OF", "NEW", "VALUE_OF", "LocalValues", "gathered", "gathers_in", "handed_out", "held_ref", "iter_gathers", "made_by_call", "makes_copy", "may_gather", "view_base"]
