"""Collections known to hold at most one entry.

A check of "the last entry" or "the first entry" of a collection that holds one entry checks
all of them. A collection holds at most one entry when:

- it is spelled with one element: `[x]`, `(x,)`, `range(1)`, `xs[:1]`, `xs[-1:]`, or it is
  what a call builds from one-element lists (`make_batch([prompt], [seq_len])`: every list
  or tuple among its arguments holds one element);
- the same function guarantees it before: `assert len(xs) == 1`, `assert len(xs) <= 1`,
  `if len(xs) != 1: raise` (or `return`), `if len(xs) > 1: raise` (also spelled with
  `xs.values()`, `list(xs)`, `enumerate(xs)`), or unpacks it into one target (`(x,) = xs`
  raises otherwise), or the check runs under `if len(xs) == 1:`;
- its values are all one object: a local bound once to `dict.fromkeys(names, md)` or
  `{name: md for name in names}` and not stored into afterwards;
- it is an attribute of `self` (`self.draft_attn_groups`) and *every* write to that attribute
  that can reach this object keeps it at one entry or none, with at least one write that
  proves it (`if len(groups) != 1: raise` before `self.draft_attn_groups = list(groups)`, or
  after it on the attribute). The writes are found in the class, its bases and its subclasses,
  across the project and the modules read from the environment. No proof when a write is
  made through another object (`runner.drafter.draft_attn_groups = ...`, whose class cannot
  be known), when the attribute is grown in place (`.append`, `.extend`, `+=`, `[k] = v`),
  or when a class on the way cannot be read (an unresolved base, a bundled model whose
  method bodies are not modelled). A base's method that the class overrides without calling
  it through `super()` never runs on its instances: its writes do not count.
"""

from __future__ import annotations

import ast
import weakref
from typing import Iterator

from .facts import FUNCS, ref, walk_local
from .needs import Words

# methods that add entries to a list, dict, set or deque in place
GROWS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "appendleft", "extendleft", "__setitem__", "__iadd__"})


def source(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:
        return ast.dump(node)


def collection(expr: ast.AST) -> ast.AST:
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


def spellings(it: ast.AST) -> Iterator[str]:
    """A collection spelled every way a length guarantee may name it."""
    yield source(it)
    inner = it
    while isinstance(inner, ast.Call) and len(inner.args) == 1 and ref(inner.func) in (
        "list", "tuple", "sorted", "reversed", "enumerate", "iter"
    ):
        inner = inner.args[0]
        yield source(inner)
    yield source(collection(inner))


def one_element(it: ast.AST, singles: set[str]) -> bool:
    """Whether iterating `it` sees at most one element, from its spelling or from the
    guarantees `singles` (collections a `len` check or an unpacking fixed at one)."""
    if isinstance(it, (ast.List, ast.Tuple, ast.Set)):
        return len(it.elts) <= 1 and not any(isinstance(e, ast.Starred) for e in it.elts)
    if isinstance(it, ast.Dict):
        return len(it.keys) <= 1 and None not in it.keys
    if isinstance(it, ast.Call) and ref(it.func) == "range" and len(it.args) == 1:
        a = it.args[0]
        if isinstance(a, ast.Constant) and a.value in (0, 1):
            return True
    if isinstance(it, ast.Call) and _batch_of_one(it):
        return True
    if isinstance(it, ast.Subscript) and isinstance(it.slice, ast.Slice) and it.slice.step is None:
        lower = source(it.slice.lower) if it.slice.lower is not None else "0"
        upper = source(it.slice.upper) if it.slice.upper is not None else None
        if (lower, upper) in {("0", "1"), ("-1", None)}:
            return True
    return any(s in singles for s in spellings(it))


def _batch_of_one(call: ast.Call) -> bool:
    """A call given its batch as one-element lists (`make_batch([prompt], [seq_len])`): every
    list or tuple spelled among its arguments holds one element, and one at least is spelled.
    What it builds per element, it builds once."""
    values = list(call.args) + [k.value for k in call.keywords]
    if any(isinstance(v, ast.Starred) for v in values) or any(k.arg is None for k in call.keywords):
        return False
    spelled = [v for v in values if isinstance(v, (ast.List, ast.Tuple))]
    if not spelled or any(isinstance(v, (ast.ListComp, ast.GeneratorExp, ast.Dict, ast.Set)) for v in values):
        return False
    return all(len(v.elts) == 1 and not isinstance(v.elts[0], ast.Starred) for v in spelled)


def _len_subject(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and ref(node.func) == "len" and len(node.args) == 1:
        return source(collection(node.args[0]))
    return None


def guaranteed_single(test: ast.AST, *, positive: bool) -> str | None:
    """`xs` when `test` being true (`positive`, an assert) or false (an `if` that raises)
    guarantees `len(xs) == 1` (or at most one)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return guaranteed_single(test.operand, positive=not positive)
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


def unpacked_single(st: ast.AST) -> str | None:
    """`xs` for `(x,) = xs` / `[x] = xs.values()`: the unpacking raises unless xs holds one."""
    if isinstance(st, ast.Assign) and len(st.targets) == 1:
        t = st.targets[0]
        if isinstance(t, (ast.Tuple, ast.List)) and len(t.elts) == 1 and not isinstance(t.elts[0], ast.Starred):
            return source(collection(st.value))
    return None


def guarantee_of(st: ast.stmt) -> str | None:
    """The collection a statement fixes at one entry from here on, if any."""
    if isinstance(st, ast.Assert):
        return guaranteed_single(st.test, positive=True)
    if isinstance(st, ast.If) and any(isinstance(s, (ast.Raise, ast.Return)) for s in st.body):
        return guaranteed_single(st.test, positive=False)
    return unpacked_single(st)


def one_object(value: ast.AST) -> bool:
    """A mapping whose values are all one object: `dict.fromkeys(names, md)`,
    `{name: md for name in names}` (the value not read from the loop)."""
    if isinstance(value, ast.Call) and ref(value.func) == "dict.fromkeys" and len(value.args) == 2:
        return True
    if isinstance(value, ast.DictComp):
        bound = {n.id for g in value.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        return not any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(value.value))
    return False


# -- attributes of self -----------------------------------------------------------------------


def self_attribute(it: ast.AST) -> str | None:
    """`X` when a loop iterates `self.X` (or `self.X.values()`, `enumerate(self.X)`, ...)."""
    inner = it
    while isinstance(inner, ast.Call) and len(inner.args) == 1 and ref(inner.func) in (
        "list", "tuple", "sorted", "reversed", "enumerate", "iter"
    ):
        inner = inner.args[0]
    r = ref(collection(inner))
    if r is not None and r.startswith("self.") and r.count(".") == 1:
        return r.split(".", 1)[1]
    return None


def attribute_holds_one(view, attr: str) -> bool:
    """Whether `self.<attr>` holds at most one entry on every instance the method of `view`
    can run on (see the module docstring)."""
    owner = view.owner()
    if owner is None:
        return False
    project = view.project
    memo = _MEMO.setdefault(project, {})
    return project.tracker.memo(memo, (owner.name, attr), lambda: _attribute_holds_one(project, owner, attr))


_MEMO: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # per project: (class, attr) -> answer


def _attribute_holds_one(project, owner, attr: str) -> bool:
    if owner.has_unresolved_base():
        return False
    family = {c.name for c in owner.classes()}
    modules = {c.module.path: c.module for c in owner.classes()}
    if any(m.origin == "bundled" for m in modules.values()):
        return False
    for path in project.files_containing(attr):
        modules.setdefault(path, project.module_at(path))
    word = Words(attr)
    proven = False
    for module in modules.values():
        for chunk in module.leaf_chunks(word):
            chunk_facts = module.chunk_facts(chunk)
            for cls_facts in chunk_facts.classes.values():
                # a class-body default (`draft_attn_groups = []`) is checked with the writes
                if attr in cls_facts.attrs and cls_facts.attrs[attr] is not None:
                    info = module.klass(cls_facts.qual) if cls_facts.qual != "<members>" else None
                    if info is None or _related(info, owner, family):
                        return False
            for facts in chunk_facts.functions.values():
                touches = [s for s in facts.stores if s.attr == attr] or [
                    c for c in facts.calls if c.recv and c.recv.rsplit(".", 1)[-1] == attr and c.name in GROWS
                ]
                if not touches and not _mentions_write(module, facts, attr):
                    continue
                verdict = _writes_in(project, module, facts, attr, owner, family)
                if verdict is None:
                    return False
                proven = proven or verdict
    return proven


def _mentions_write(module, facts, attr: str) -> bool:
    """A subscript store or delete on the attribute (`self.X[k] = v`), which facts do not
    record: read from the function's text."""
    text = module.source.text
    lo = module.source.line_starts[facts.line - 1] if facts.line - 1 < len(module.source.line_starts) else 0
    hi = module.source.line_starts[facts.end_line] if facts.end_line < len(module.source.line_starts) else len(text)
    seg = text[lo:hi]
    return f".{attr}[" in seg.replace(" ", "")


def _related(info, owner, family: set[str]) -> bool:
    """`info` is `owner`, a base of it, or a subclass of it."""
    return info.name in family or owner.name in {c.name for c in info.classes()}


def _writes_in(project, module, facts, attr: str, owner, family: set[str]) -> bool | None:
    """For one function: None when a write may break the guarantee; True when it writes the
    attribute with one entry proven; False when it writes nothing that matters here."""
    from .project import FunctionInfo

    if _overridden(module, facts, owner):
        return False  # never runs on `owner`'s instances
    node = FunctionInfo(module, facts).node()
    if node is None:
        return None
    self_name = facts.params[0] if facts.cls is not None and facts.params else None
    related = None
    proven = False
    singles: set[str] = set()
    writes: list[tuple[ast.AST, ast.AST | None]] = []  # (target holder, value) of `T.attr = v`
    for st in _statements(node):
        g = guarantee_of(st)
        if g is not None:
            singles.add(g)
    for sub in walk_local(node):
        target = None
        if isinstance(sub, (ast.Assign, ast.AnnAssign)):
            for t in sub.targets if isinstance(sub, ast.Assign) else [sub.target]:
                if isinstance(t, ast.Attribute) and t.attr == attr:
                    writes.append((t.value, sub.value))
                elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) and t.value.attr == attr:
                    target = t.value.value
        elif isinstance(sub, ast.AugAssign):
            t = sub.target
            if isinstance(t, ast.Attribute) and t.attr == attr:
                target = t.value
            elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) and t.value.attr == attr:
                target = t.value.value
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in GROWS:
            holder = sub.func.value
            if isinstance(holder, ast.Attribute) and holder.attr == attr:
                target = holder.value
        if target is not None:
            # grown in place: fine only on an object that cannot be ours
            if not _is_self(target, self_name):
                return None
            related = _related_fn(module, facts, owner, family) if related is None else related
            if related:
                return None
    for holder, value in writes:
        if not _is_self(holder, self_name):
            return None
        related = _related_fn(module, facts, owner, family) if related is None else related
        if not related:
            continue
        if value is None:
            return None
        if one_element(value, singles) or f"self.{attr}" in singles or (self_name and f"{self_name}.{attr}" in singles):
            proven = proven or not _empty(value)
            continue
        if isinstance(value, ast.Constant) and value.value is None:
            continue
        return None
    return proven


def _overridden(module, facts, owner) -> bool:
    """A method of a base of `owner` that `owner` (or a class between them) overrides without
    calling it through `super()`: it never runs on `owner`'s instances."""
    if facts.cls is None:
        return False
    mro = owner.classes()
    if not any(c.module.path == module.path and c.qual == facts.cls for c in mro[1:]):
        return False  # not a base's method (the class's own, or a subclass's)
    name = facts.qual.rsplit(".", 1)[-1]
    for cls in mro:
        if cls.module.path == module.path and cls.qual == facts.cls:
            return False  # reached the class that defines it
        if name not in cls.own_members():
            continue
        override = cls.module.function(f"{cls.qual}.{name}")
        if override is None or any(c.ref == f"super().{name}" for c in override.facts.calls):
            return False
        return True
    return False


def _empty(value: ast.AST) -> bool:
    return (isinstance(value, (ast.List, ast.Tuple, ast.Set)) and not value.elts) or (
        isinstance(value, ast.Dict) and not value.keys
    ) or (isinstance(value, ast.Call) and ref(value.func) in ("list", "tuple", "dict", "set") and not value.args)


def _is_self(node: ast.AST, self_name: str | None) -> bool:
    return self_name is not None and isinstance(node, ast.Name) and node.id == self_name


def _related_fn(module, facts, owner, family: set[str]) -> bool:
    if facts.cls is None:
        return False
    info = module.klass(facts.cls)
    return info is not None and _related(info, owner, family)


def _statements(node: ast.AST) -> Iterator[ast.stmt]:
    """The statements of a function in source order, nested blocks included, nested
    definitions not."""
    stack = list(reversed(node.body))
    while stack:
        st = stack.pop()
        yield st
        if isinstance(st, (*FUNCS, ast.ClassDef)):
            continue
        children = []
        for name in ("body", "orelse", "finalbody"):
            children.extend(getattr(st, name, None) or [])
        for h in getattr(st, "handlers", None) or []:
            children.extend(h.body)
        for c in getattr(st, "cases", None) or []:
            children.extend(c.body)
        stack.extend(reversed(children))
