"""What one definition tells the rest of the project, built from its `ast` and kept as plain
data (cached per file content): the names a module binds, a class's bases and members, and for
each function the calls it makes, the attributes it writes, the parameters it validates.

A *ref* is the dotted spelling of an expression that names something: `self.model.model`,
`torch.nn.Module`, `super().forward`; expressions that name nothing (a call's result, a
subscript) have no ref. Resolution of refs to definitions lives in `project`.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Iterator

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def ref(node: ast.AST | None) -> str | None:
    """`a.b.c` for Name/Attribute chains, `super().f` for super calls; else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "super"
        and not node.keywords
    ):
        parts.append("super()")
    else:
        return None
    return ".".join(reversed(parts))


def last_name(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def literal_kind(node: ast.AST | None) -> str | None:
    """'True', 'False', 'None' for those constants; None otherwise."""
    if isinstance(node, ast.Constant) and (node.value is True or node.value is False or node.value is None):
        return repr(node.value)
    return None


def walk_local(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under `node` that runs as part of it: nested defs, classes and lambdas are
    other scopes and are not entered (their decorators and defaults are)."""
    if isinstance(node, FUNCS):
        # a function is walked by many questions (facts, aliases, each rule's look for
        # candidates): its nodes are listed once, kept on the node, in the same order
        got = node.__dict__.get("_local_nodes")
        if got is None:
            got = node.__dict__["_local_nodes"] = list(_walk_local(node))
        return iter(got)
    return _walk_local(node)


def _walk_local(node: ast.AST) -> Iterator[ast.AST]:
    # `ast.iter_child_nodes` in line: the same nodes in the same order, without a generator
    # and a `getattr` per field of every node (the walk is most of what facts cost)
    AST, FUN, CLS, LAM = ast.AST, _FUNC_TYPES, ast.ClassDef, ast.Lambda
    stack: list[ast.AST] = []
    push_children(node, stack, AST)
    pop, push = stack.pop, stack.append
    while stack:
        cur = pop()
        yield cur
        kind = type(cur)
        if kind in FUN:
            stack.extend(cur.decorator_list)
            stack.extend(d for d in cur.args.defaults + cur.args.kw_defaults if d is not None)
            continue
        if kind is CLS:
            stack.extend(cur.decorator_list)
            stack.extend(cur.bases)
            continue
        if kind is LAM:
            continue
        for name in kind._fields:
            value = getattr(cur, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, AST):
                        push(item)
            elif isinstance(value, AST):
                push(value)


_FUNC_TYPES = frozenset(FUNCS)


def push_children(node: ast.AST, stack: list, AST=ast.AST) -> None:
    """Append the child nodes of `node` to `stack`, in `ast.iter_child_nodes` order."""
    for name in node._fields:
        value = getattr(node, name, None)
        if type(value) is list:
            stack.extend([item for item in value if isinstance(item, AST)])
        elif isinstance(value, AST):
            stack.append(value)


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """`list(ast.iter_child_nodes(node))`, at a third of the cost."""
    out: list[ast.AST] = []
    push_children(node, out)
    return out


# -- records ----------------------------------------------------------------------------------


@dataclass
class CallFact:
    name: str | None  # the last name of the callee: `compact` for `a.b.compact(...)`
    ref: str | None  # the whole callee: `a.b.compact`
    recv: str | None  # the receiver: `a.b`
    arg0: str | None  # 'True'/'False'/'None' when the switch-like first argument is one
    args: list[str | None]  # refs of the positional arguments
    kwargs: dict[str, str | None]
    line: int
    col: int


@dataclass
class StoreFact:
    """A write to an attribute: `target.attr = v`, `target.attr += v`, `target.attr.add_(v)`,
    `replace(target, attr=v)`; `op` says which."""

    target: str | None
    attr: str
    op: str  # '=', '+=', '-=', 'add_', 'sub_', 'copy_' (of the old value plus a delta), 'inplace' (any other in-place method), 'replace', 'out' (`out=`),
    # 'rows=' (`x.f[:n] = x.f[:n] + k`)
    line: int
    col: int
    value: str | None = None  # ref of the value, when it is one
    delta: int | None = None  # +k / -k when the new value is the old one plus a literal


@dataclass
class FunctionFacts:
    qual: str  # qualified name within its module: `Cls.meth`, `f.<locals>.g`
    cls: str | None  # the class it is a method of
    line: int
    end_line: int
    params: list[str]
    annotations: dict[str, str | None]
    calls: list[CallFact] = field(default_factory=list)
    stores: list[StoreFact] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)  # local = dotted ref (single binding)
    self_attrs: dict[str, list[str]] = field(default_factory=dict)  # attr -> [how, ref]
    validates: list[str] = field(default_factory=list)  # parameters checked by type
    imports: dict[str, list] = field(default_factory=dict)  # function-local imports
    # the objects whose rows it gathers in place (`buf[:n].copy_(buf[idx])`), as dotted refs
    # through its locals (`buf = layer.indexer.topk_indices_buffer`); a copy's are left out
    gathers: list[str] = field(default_factory=list)
    # its whole body is `...`: in a bundled model, a body that is not modelled (see
    # `Project.function_of`); elsewhere an abstract method or a protocol's
    ellipsis: bool = False
    # parameters annotated as containers: the class of their entries (`dict[str, Cls]`)
    elements: dict[str, str] = field(default_factory=dict)


@dataclass
class ClassFacts:
    qual: str
    line: int
    bases: list[str | None]
    attrs: dict[str, str | None]  # class-body bindings: name -> ref of the value
    methods: list[str]
    fields: list[str]  # annotated class-body names (dataclass fields)
    types: dict[str, str] = field(default_factory=dict)  # annotated name -> the class it declares


@dataclass
class ModuleFacts:
    # name -> list of [kind, payload]: ['module', 'a.b'], ['from', level, 'a.b', 'name'],
    # ['def', qual], ['class', qual], ['alias', ref], ['value', None]
    bindings: dict[str, list[list]] = field(default_factory=dict)
    stars: list[list] = field(default_factory=list)  # [level, module]


def to_json(obj: Any) -> Any:
    # shallow: the lists and dicts inside hold only strings and numbers, and are written
    # out as they are (`asdict` deep-copies every one of them, the slowest part of saving)
    if isinstance(obj, FunctionFacts):
        out = dict(obj.__dict__)
        out["calls"] = [dict(c.__dict__) for c in obj.calls]
        out["stores"] = [dict(s.__dict__) for s in obj.stores]
        return out
    if isinstance(obj, (ClassFacts, ModuleFacts, CallFact, StoreFact)):
        return dict(obj.__dict__)
    return asdict(obj)


def function_from_json(raw: dict) -> FunctionFacts:
    f = FunctionFacts(**raw)
    f.calls = [CallFact(**c) for c in raw["calls"]]
    f.stores = [StoreFact(**s) for s in raw["stores"]]
    return f


# -- building --------------------------------------------------------------------------------


def import_bindings(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, list]]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                yield alias.asname, ["module", alias.name]
            else:
                head = alias.name.split(".", 1)[0]
                yield head, ["module", head]
    else:
        for alias in node.names:
            if alias.name == "*":
                continue
            yield alias.asname or alias.name, ["from", node.level, node.module or "", alias.name]


def target_names(target: ast.AST) -> Iterator[str]:
    """The names an assignment target binds, through unpacking."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from target_names(target.value)


def module_facts(stmts: Iterable[ast.stmt], prefix: str = "") -> ModuleFacts:
    """The names module-level statements bind (also inside module-level if/try blocks)."""
    out = ModuleFacts()

    def bind(name: str, how: list) -> None:
        out.bindings.setdefault(name, []).append(how)

    def visit(body: Iterable[ast.stmt]) -> None:
        for st in body:
            if isinstance(st, FUNCS):
                bind(st.name, ["def", prefix + st.name])
            elif isinstance(st, ast.ClassDef):
                bind(st.name, ["class", prefix + st.name])
            elif isinstance(st, (ast.Import, ast.ImportFrom)):
                if isinstance(st, ast.ImportFrom) and any(a.name == "*" for a in st.names):
                    out.stars.append([st.level, st.module or ""])
                for name, how in import_bindings(st):
                    bind(name, how)
            elif isinstance(st, (ast.Assign, ast.AnnAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                value = st.value
                for t in targets:
                    for name in target_names(t):
                        r = ref(value) if isinstance(t, ast.Name) else None
                        bind(name, ["alias", r] if r else ["value", None])
            elif isinstance(st, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or type(st).__name__ == "TryStar":
                for attr in ("body", "orelse", "finalbody"):
                    visit(getattr(st, attr, None) or [])
                for handler in getattr(st, "handlers", None) or []:
                    visit(handler.body)
                if isinstance(st, ast.For):
                    for name in target_names(st.target):
                        bind(name, ["value", None])

    visit(stmts)
    return out


# wrappers of a function bound in a class body that still call it: `f = staticmethod(g)`
_MEMBER_WRAPPERS = frozenset({"staticmethod", "classmethod", "partial", "partialmethod"})


def member_ref(value: ast.AST | None) -> str | None:
    """The ref of what a class-body binding names: `g` of `f = g`, and of `f =
    staticmethod(g)`, `classmethod(g)`, `functools.partial(g, ...)`, `partialmethod(g, ...)`
    (a call of the member runs `g`)."""
    r = ref(value)
    if r is not None:
        return r
    if isinstance(value, ast.Call) and last_name(value.func) in _MEMBER_WRAPPERS and value.args:
        return member_ref(value.args[0])
    return None


def class_facts(node: ast.ClassDef, qual: str, methods: Iterable[str] = ()) -> ClassFacts:
    attrs: dict[str, str | None] = {}
    fields: list[str] = []
    types: dict[str, str] = {}
    names = set(methods)
    for st in node.body:
        if isinstance(st, FUNCS) or isinstance(st, ast.ClassDef):
            names.add(st.name)
        elif isinstance(st, (ast.If, ast.Try, ast.With)) or type(st).__name__ == "TryStar":
            # `if HAS_KERNEL: def m(...)` / `else: def m(...)`: a member when every branch
            # defines it; kept as an attribute (value None, as a method's)
            for name in _defined_on_every_branch([st]):
                attrs.setdefault(name, None)
        elif isinstance(st, ast.Assign):
            for t in st.targets:
                for name in target_names(t):
                    attrs[name] = member_ref(st.value) if isinstance(t, ast.Name) else None
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            fields.append(st.target.id)
            if st.value is not None:
                attrs[st.target.id] = member_ref(st.value)
            declared = annotation_ref(st.annotation)
            if declared:
                types[st.target.id] = declared
    return ClassFacts(
        qual=qual,
        line=node.lineno,
        # `Generic[T]`, `Base[Config]`: the class derives from the subscripted one
        bases=[ref(b.value if isinstance(b, ast.Subscript) else b) for b in node.bases],
        attrs=attrs,
        methods=sorted(names),
        fields=fields,
        types=types,
    )


_INPLACE_ADD = {"add_": "add_", "sub_": "sub_"}


# calls that keep a value within bounds: a capped advance is still an advance
_CAPS = frozenset({"min", "max", "clamp", "clip", "minimum", "maximum", "clamp_max", "clamp_min"})


def uncapped(value: ast.AST | None) -> ast.AST | None:
    """The moved value inside a cap (`min(x + 1, limit)`, `torch.clamp(x + 1, max=m)`,
    `(x + 1).clamp(max=m)`); `value` itself otherwise."""
    if isinstance(value, ast.Call) and last_name(value.func) in _CAPS:
        if isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.BinOp):
            return value.func.value
        moved = [a for a in value.args if isinstance(a, ast.BinOp)]
        if len(moved) == 1:
            return moved[0]
    return value


def _delta(value: ast.AST, target_src: str | None) -> int | None:
    """+k/-k when `value` is `<target_src> + k` / `- k` (k a literal int)."""
    if not isinstance(value, ast.BinOp) or target_src is None:
        return None
    if ref(value.left) != target_src:
        return None
    if isinstance(value.right, ast.Constant) and isinstance(value.right.value, int):
        k = value.right.value
    else:
        return 1 if isinstance(value.op, ast.Add) else (-1 if isinstance(value.op, ast.Sub) else None)
    if isinstance(value.op, ast.Add):
        return k
    if isinstance(value.op, ast.Sub):
        return -k
    return None


def _out_delta(call: ast.Call, target_src: str | None) -> int | None:
    """+k/-k when a call writing `out=<target_src>` stores the old value plus or minus k:
    `torch.add(t, k, out=t)`, `torch.sub(t, k, out=t)`, `torch.clamp(t + k, ..., out=t)`."""
    if target_src is None or not call.args:
        return None
    name = last_name(call.func)
    if name in ("add", "sub") and len(call.args) >= 2 and ref(_unsliced(call.args[0])) == target_src:
        amount = call.args[1]
        k = amount.value if isinstance(amount, ast.Constant) and isinstance(amount.value, int) and not isinstance(amount.value, bool) else 1
        return k if name == "add" else -k
    first = call.args[0]
    if isinstance(first, ast.BinOp) and isinstance(first.left, ast.Subscript):
        first = ast.BinOp(left=_unsliced(first.left), op=first.op, right=first.right)
    return _delta(first, target_src)


def _unsliced(node: ast.AST) -> ast.AST:
    return node.value if isinstance(node, ast.Subscript) else node


def _raises(body: list[ast.stmt]) -> bool:
    return any(isinstance(s, ast.Raise) for s in body)


def _checked_names(test: ast.AST) -> Iterator[str]:
    """Names whose type `test` checks: isinstance(x, T), type(x) is/in/== T."""
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("isinstance", "type") and node.args and isinstance(node.args[0], ast.Name):
                yield node.args[0].id


_WRAPPERS = frozenset({"Optional", "Annotated", "ClassVar", "Final", "Required", "NotRequired", "ReadOnly"})
_MAPPINGS = frozenset({"dict", "Dict", "Mapping", "MutableMapping", "defaultdict", "DefaultDict", "OrderedDict"})
_SEQUENCES = frozenset({
    "list", "List", "Sequence", "MutableSequence", "tuple", "Tuple", "set", "Set", "frozenset",
    "FrozenSet", "Iterable", "Iterator", "Collection", "deque", "Deque",
})


def _annotation_node(node: ast.AST | None) -> ast.AST | None:
    """An annotation without its spelling: a string annotation parsed, `X | None`,
    `Optional[X]`, `Union[X, None]`, `Annotated[X, ...]` reduced to `X`."""
    for _ in range(8):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value.strip(), mode="eval").body
            except SyntaxError:
                return None
            continue
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            sides = [n for n in (node.left, node.right) if not (isinstance(n, ast.Constant) and n.value is None)]
            if len(sides) != 1:
                return None
            node = sides[0]
            continue
        if isinstance(node, ast.Subscript):
            head = last_name(node.value)
            inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if head in _WRAPPERS:
                node = inner[0]
                continue
            if head == "Union":
                rest = [n for n in inner if not (isinstance(n, ast.Constant) and n.value is None)]
                if len(rest) != 1:
                    return None
                node = rest[0]
                continue
        return node
    return None


def annotation_ref(node: ast.AST | None) -> str | None:
    """The class an annotation names (see `_annotation_node`); None for a generic or a union."""
    found = _annotation_node(node)
    return ref(found) if found is not None and not isinstance(found, ast.Subscript) else None


def returns_own_class(fn: ast.AST) -> bool:
    """A `@classmethod` whose every `return` builds `cls(...)` (its first parameter)."""
    if not any(last_name(d) == "classmethod" for d in getattr(fn, "decorator_list", ())) or not fn.args.args:
        return False
    me = fn.args.args[0].arg
    returns = [sub for sub in walk_local(fn) if isinstance(sub, ast.Return)]
    return bool(returns) and all(
        isinstance(r.value, ast.Call) and isinstance(r.value.func, ast.Name) and r.value.func.id == me for r in returns
    )


def element_ref(node: ast.AST | None) -> str | None:
    """The class of the entries of a container annotation: `V` of `dict[K, V]` or
    `Mapping[K, V]`, `X` of `list[X]`, `Sequence[X]`, `tuple[X, ...]`."""
    found = _annotation_node(node)
    if not isinstance(found, ast.Subscript):
        return None
    head = last_name(found.value)
    inner = found.slice.elts if isinstance(found.slice, ast.Tuple) else [found.slice]
    if head in _MAPPINGS and len(inner) == 2:
        return annotation_ref(inner[1])
    if head in _SEQUENCES and inner:
        return annotation_ref(inner[0])
    return None


def _only_ellipsis(body: list[ast.stmt]) -> bool:
    return len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and body[0].value.value is Ellipsis


def call_fact(call: ast.Call) -> CallFact:
    """The record of one call: its callee, receiver, literal first argument and arguments."""
    arg0 = literal_kind(call.args[0]) if call.args else None
    if arg0 is None and len(call.keywords) == 1 and not call.args:
        arg0 = literal_kind(call.keywords[0].value)
    return CallFact(
        last_name(call.func),
        ref(call.func),
        ref(call.func.value) if isinstance(call.func, ast.Attribute) else None,
        arg0,
        [ref(a) for a in call.args],
        {k.arg: ref(k.value) for k in call.keywords if k.arg},
        call.lineno,
        call.col_offset,
    )


# the nodes `function_facts` reads; any other node is passed over at the cost of one lookup
_FACT_NODES = frozenset({
    ast.Call, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.comprehension,
    ast.NamedExpr, ast.Import, ast.ImportFrom, ast.Assert, ast.If, ast.With, ast.AsyncWith,
})


def function_facts(node: ast.FunctionDef | ast.AsyncFunctionDef, qual: str, cls: str | None) -> FunctionFacts:
    args = node.args
    params = [a.arg for a in args.posonlyargs + args.args]
    all_params = params + [a.arg for a in args.kwonlyargs]
    every = args.posonlyargs + args.args + args.kwonlyargs
    annotations = {a.arg: annotation_ref(a.annotation) for a in every}
    facts = FunctionFacts(
        qual=qual,
        cls=cls,
        line=node.lineno,
        end_line=getattr(node, "end_lineno", None) or node.lineno,
        params=params + [p for p in all_params if p not in params],
        annotations=annotations,
        ellipsis=_only_ellipsis(node.body),
        elements={a.arg: e for a in every if (e := element_ref(a.annotation)) is not None},
    )
    assigned: dict[str, set[str | None]] = {}
    self_name = params[0] if cls is not None and params else None
    from .gathers import gathers_in, may_gather  # it reads these records' helpers

    maybe: list[ast.AST] = []
    for sub in walk_local(node):
        kind = type(sub)
        if kind not in _FACT_NODES:
            continue  # (most nodes: names, attributes, constants, operators tell nothing here)
        if (kind is ast.Call or kind is ast.Assign) and may_gather(sub):
            maybe.append(sub)
        if kind is ast.Call:
            facts.calls.append(call_fact(sub))
            # in-place tensor updates of an attribute: `x.seq_lens.add_(1)`, `x.f.fill_(0)`,
            # also of its rows (`x.positions[:n].add_(1)`)
            holder = sub.func.value if isinstance(sub.func, ast.Attribute) else None
            if isinstance(holder, ast.Subscript):
                holder = holder.value
            if isinstance(holder, ast.Attribute):
                method = sub.func.attr
                if method.endswith("_") and not method.startswith("_"):
                    delta = None
                    op = _INPLACE_ADD.get(method, "inplace")
                    if method in _INPLACE_ADD and sub.args and isinstance(sub.args[0], ast.Constant):
                        v = sub.args[0].value
                        if isinstance(v, (int, float)) and not isinstance(v, bool):
                            delta = int(v) if method == "add_" else -int(v)
                    elif method == "copy_" and len(sub.args) == 1 and holder is sub.func.value:
                        # `x.seq_lens.copy_(x.seq_lens + 1)`: the old value moved by the amount
                        delta = _delta(uncapped(sub.args[0]), ref(holder))
                        if delta is not None:
                            op = "copy_"
                    facts.stores.append(
                        StoreFact(ref(holder.value), holder.attr, op, sub.lineno, sub.col_offset, None, delta)
                    )
            # `torch.add(x.positions, 1, out=x.positions)`, `torch.clamp(x.seq_lens + 1, max=m,
            # out=x.seq_lens[:n])`: written in place by a function's `out=`
            for kw in sub.keywords:
                if kw.arg == "out":
                    holder = kw.value.value if isinstance(kw.value, ast.Subscript) else kw.value
                    if isinstance(holder, ast.Attribute):
                        facts.stores.append(
                            StoreFact(ref(holder.value), holder.attr, "out", sub.lineno, sub.col_offset,
                                      None, _out_delta(sub, ref(holder)))
                        )
            # `replace(x, f=...)`, `dataclasses.replace(x, ...)`, `x.replace(f=...)`
            if last_name(sub.func) == "replace" and sub.keywords:
                if isinstance(sub.func, ast.Attribute) and not (
                    isinstance(sub.func.value, ast.Name) and sub.func.value.id == "dataclasses"
                ):
                    target = ref(sub.func.value)
                else:
                    target = ref(sub.args[0]) if sub.args else None
                for kw in sub.keywords:
                    if kw.arg:
                        src = f"{target}.{kw.arg}" if target else None
                        facts.stores.append(
                            StoreFact(target, kw.arg, "replace", sub.lineno, sub.col_offset,
                                      ref(kw.value), _delta(kw.value, src))
                        )
        elif isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            value = sub.value
            for t in targets:
                if isinstance(t, ast.Attribute):
                    tref = ref(t.value)
                    if isinstance(sub, ast.AugAssign):
                        op = "+=" if isinstance(sub.op, ast.Add) else ("-=" if isinstance(sub.op, ast.Sub) else "op=")
                        delta = None
                        if isinstance(value, ast.Constant) and isinstance(value.value, int) and not isinstance(value.value, bool):
                            delta = value.value if op == "+=" else (-value.value if op == "-=" else None)
                        elif op in ("+=", "-="):
                            delta = 1 if op == "+=" else -1
                        facts.stores.append(StoreFact(tref, t.attr, op, sub.lineno, sub.col_offset, ref(value), delta))
                    elif value is not None:
                        src = ref(t)
                        facts.stores.append(
                            StoreFact(tref, t.attr, "=", sub.lineno, sub.col_offset, ref(value), _delta(uncapped(value), src))
                        )
                        if self_name is not None and tref == self_name:
                            how = _self_attr(value)
                            if how is not None:
                                facts.self_attrs.setdefault(t.attr, how)
                    if self_name is not None and tref == self_name and isinstance(sub, ast.AnnAssign):
                        # `self.x: Cls | None = None`: the declared class wins
                        declared = annotation_ref(sub.annotation)
                        if declared:
                            facts.self_attrs[t.attr] = ["new", declared]
                elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) and isinstance(sub, ast.AugAssign):
                    # `x.seq_lens[:n] += 1`
                    holder = t.value
                    op = "+=" if isinstance(sub.op, ast.Add) else ("-=" if isinstance(sub.op, ast.Sub) else "op=")
                    facts.stores.append(StoreFact(ref(holder.value), holder.attr, op, sub.lineno, sub.col_offset))
                elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) and isinstance(uncapped(value), ast.BinOp):
                    # `x.positions[:n] = x.positions[:n] + 1`: rows of the field, moved by the amount
                    # (also capped: `torch.clamp(x.positions[:n] + 1, max=m)`)
                    holder = t.value
                    moved = uncapped(value)
                    old = ast.BinOp(left=_unsliced(moved.left), op=moved.op, right=moved.right)
                    delta = _delta(old, ref(holder))
                    if delta is not None:
                        facts.stores.append(StoreFact(ref(holder.value), holder.attr, "rows=", sub.lineno, sub.col_offset, None, delta))
                elif isinstance(t, ast.Name) and not isinstance(sub, ast.AugAssign):
                    assigned.setdefault(t.id, set()).add(ref(value) if value is not None else None)
                else:
                    for name in target_names(t):
                        assigned.setdefault(name, set()).add(None)
        elif isinstance(sub, (ast.For, ast.AsyncFor, ast.comprehension)):
            for name in target_names(sub.target):
                assigned.setdefault(name, set()).add(None)
        elif isinstance(sub, ast.NamedExpr):
            assigned.setdefault(sub.target.id, set()).add(ref(sub.value))
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            for name, how in import_bindings(sub):
                facts.imports[name] = how
        elif isinstance(sub, ast.Assert):
            facts.validates.extend(n for n in _checked_names(sub.test) if n in all_params)
        elif isinstance(sub, ast.If) and _raises(sub.body):
            facts.validates.extend(n for n in _checked_names(sub.test) if n in all_params)
        elif isinstance(sub, (ast.With, ast.AsyncWith)):
            for item in sub.items:
                if item.optional_vars is not None:
                    for name in target_names(item.optional_vars):
                        assigned.setdefault(name, set()).add(None)
    for name, values in assigned.items():
        if len(values) == 1:
            (value,) = values
            if value is not None and name not in all_params:
                facts.aliases[name] = value
    facts.validates = sorted(set(facts.validates))
    if maybe:
        found: dict[str, None] = {}
        for refs in gathers_in(node, maybe).values():
            found.update(dict.fromkeys(refs))
        facts.gathers = list(found)
    return facts


def gathered_buffer(node: ast.AST) -> str | None:
    """The buffer whose rows `node` gathers in place, reading the buffer itself at an index
    (`buf[:n].copy_(buf[idx])`, `buf[:n] = buf[idx]`, `buf.narrow(0, 0, n).copy_(buf.index_select(0, idx))`,
    `torch.index_select(buf, 0, idx, out=buf[:n])`, ...: `analysis/gathers.py`), as spelled,
    without following local names; else None."""
    from .gathers import gathered

    return gathered(node)


def _self_attr(value: ast.AST | None) -> list | None:
    """How `self.x = value` binds x: a new instance, a function, a partial of one, a copy of
    another object (`copy.copy(md)`, `md.replace(...)`: of its class); a lambda that only
    hands its parameters on, in order, is the function it calls (`lambda rows:
    m.compact(rows)`)."""
    if isinstance(value, ast.Lambda):
        body, params = value.body, [a.arg for a in value.args.posonlyargs + value.args.args]
        forwards = (
            isinstance(body, ast.Call) and not body.keywords and not value.args.vararg and not value.args.kwarg
            and [a.id if isinstance(a, ast.Name) else None for a in body.args] == params
        )
        target = ref(body.func) if forwards else None
        return ["ref", target] if target else None
    if isinstance(value, ast.Call):
        fn = ref(value.func)
        if fn is None:
            return None
        if last_name(value.func) == "partial" and value.args:
            inner = ref(value.args[0])
            return ["partial", inner] if inner else None
        if fn == "getattr" and len(value.args) in (2, 3) and isinstance(value.args[1], ast.Constant) and isinstance(value.args[1].value, str):
            # `getattr(model.model, "compact_topk_indices", None)`: the bound method, cached
            holder = ref(value.args[0])
            return ["ref", f"{holder}.{value.args[1].value}"] if holder and value.args[1].value.isidentifier() else None
        if fn in ("copy.copy", "copy.deepcopy", "copy", "deepcopy", "replace", "dataclasses.replace") and value.args:
            src = ref(value.args[0])
            return ["copy", src] if src else None
        if last_name(value.func) == "replace" and isinstance(value.func, ast.Attribute) and fn != "dataclasses.replace":
            src = ref(value.func.value)
            return ["copy", src] if src else None
        return ["new", fn]
    r = ref(value)
    return ["ref", r] if r else None


def definitions(stmts: Iterable[ast.stmt], prefix: str = "", cls: str | None = None) -> Iterator[tuple[str, str | None, ast.AST]]:
    """(qualname, enclosing class, node) of every function and class under `stmts`, nested ones
    included, with Python's qualified names (`f.<locals>.g`)."""
    for st in stmts:
        for node in _defs_in(st):
            qual = prefix + node.name
            if isinstance(node, ast.ClassDef):
                yield qual, cls, node
                yield from definitions(node.body, qual + ".", qual)
            else:
                yield qual, cls, node
                yield from definitions(node.body, qual + ".<locals>.", None)


def _defined_on_every_branch(body: list[ast.stmt]) -> set[str]:
    """Names of the definitions that a block binds whichever branch of its `if`/`try`
    statements runs (`if x: def f` / `else: def f`, or `else: f = g`: a class attribute
    bound to something other than `None`)."""
    out: set[str] = set()
    for st in body:
        if isinstance(st, FUNCS) or isinstance(st, ast.ClassDef):
            out.add(st.name)
        elif isinstance(st, ast.Assign) and not (isinstance(st.value, ast.Constant) and st.value.value is None):
            out |= {t.id for t in st.targets if isinstance(t, ast.Name)}
        elif isinstance(st, ast.If):
            out |= _defined_on_every_branch(st.body) & _defined_on_every_branch(st.orelse)
        elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            ran = _defined_on_every_branch(st.body + st.orelse)
            for handler in st.handlers:
                ran &= _defined_on_every_branch(handler.body)
            out |= ran | _defined_on_every_branch(st.finalbody)
        elif isinstance(st, ast.With):
            out |= _defined_on_every_branch(st.body)
    return out


def _defs_in(st: ast.stmt) -> Iterator[ast.AST]:
    """Definitions bound by this statement at its own level (also inside if/try/with)."""
    if isinstance(st, FUNCS) or isinstance(st, ast.ClassDef):
        yield st
        return
    for attr in ("body", "orelse", "finalbody"):
        body = getattr(st, attr, None)
        if isinstance(body, list):
            for sub in body:
                if isinstance(sub, ast.stmt):
                    yield from _defs_in(sub)
    for handler in getattr(st, "handlers", None) or []:
        for sub in handler.body:
            yield from _defs_in(sub)
    for case in getattr(st, "cases", None) or []:
        for sub in case.body:
            yield from _defs_in(sub)


def pattern_names(pattern: ast.AST) -> Iterator[str]:
    """The names a `match` case pattern binds (`case Foo(x, *rest)`)."""
    for node in ast.walk(pattern):
        name = getattr(node, "name", None)
        if isinstance(name, str) and type(node).__name__ in ("MatchAs", "MatchStar"):
            yield name
        rest = getattr(node, "rest", None)
        if isinstance(rest, str):
            yield rest


def returned_def(node: ast.AST) -> ast.AST | None:
    """The nested function a function returns by name (a decorator's wrapper)."""
    defs = {st.name: st for st in getattr(node, "body", []) if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for sub in walk_local(node):
        if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Name) and sub.value.id in defs:
            return defs[sub.value.id]
    return None
