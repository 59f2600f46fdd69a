"""Members a class gets from outside its body: a class decorator that installs one
(`cls.compact_topk_indices = _default`, `setattr(cls, "compact_topk_indices", ...)`), and a
`__getattr__` that hands every missing attribute on to another object (a wrapper that
delegates to the model it wraps).

`installs_member(project, cls, name)`: some decorator of the class, a function of the
project (through imports), assigns `name` on the class it is given, on some path.
`unseen_bases(project, cls, name, external, absent)`: the bases of a class (through its MRO)
that the project cannot see and that might provide `name`.
`delegates_attributes(cls)`: a project class defines `__getattr__` and it returns a value on
some path (not one that only raises `AttributeError`); torch's `nn.Module.__getattr__` (its
parameters and submodules) does not count.
"""

from __future__ import annotations

import ast

from .facts import last_name, ref, returned_def, walk_local
from .project import ClassInfo, Project, Scope


def class_node(cls: ClassInfo) -> ast.ClassDef | None:
    """The `ast` of a class, found by its qualified name in its module."""
    try:
        tree = ast.parse(cls.module.source.text)
    except (SyntaxError, ValueError):
        return None
    parts = cls.qual.split(".")
    body = tree.body
    found = None
    for part in parts:
        found = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if found is None:
            return None
        body = found.body
    return found


def installs_member(project: Project, cls: ClassInfo, name: str) -> bool:
    node = class_node(cls)
    if node is None or not node.decorator_list:
        return False
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        spelled = ref(target)
        if not spelled:
            continue
        sym = project.resolve(cls.module, spelled, Scope(cls.module))
        fn = project.function_of(sym) if sym.kind == "function" else None
        fnode = fn.node() if fn is not None else None
        if fnode is None:
            continue
        if isinstance(dec, ast.Call):
            # a factory: the decorator is the nested function it returns
            inner = returned_def(fnode)
            fnode = inner if inner is not None else fnode
        params = [a.arg for a in fnode.args.posonlyargs + fnode.args.args]
        if params and _assigns(fnode, params[0], name):
            return True
    return False


def delegates_attributes(cls: ClassInfo) -> bool:
    if cls.module.origin != "project" or "__getattr__" not in cls.own_members():
        # outside the project: torch's `nn.Module.__getattr__` returns parameters and
        # submodules, never a method the class lacks
        return False
    method = cls.method("__getattr__")
    node = method.node() if method is not None else None
    if node is None:
        return True  # a body the source does not show: it may hand anything on
    return any(isinstance(sub, ast.Return) and sub.value is not None for sub in walk_local(node))


def _assigns(fnode: ast.AST, param: str, name: str) -> bool:
    for sub in walk_local(fnode):
        if isinstance(sub, (ast.Assign, ast.AnnAssign)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == name and isinstance(t.value, ast.Name) and t.value.id == param:
                    return True
        elif isinstance(sub, ast.Call) and last_name(sub.func) == "setattr" and len(sub.args) >= 2:
            obj, attr = sub.args[0], sub.args[1]
            if isinstance(obj, ast.Name) and obj.id == param and isinstance(attr, ast.Constant) and attr.value == name:
                return True
    return False


def unseen_bases(project: Project, info: ClassInfo, name: str, external: set[str], absent) -> tuple[list[str], bool]:
    """(the bases, as spelled, that the project cannot see and that might define `name`;
    whether a base was found only by its short name). A base the project resolves is seen; a
    base named in `external` is trusted not to; `absent(module, spelled)` says a spelled base
    is a class of the upstream release known to hold no `name`; a name nothing binds is
    looked up by its short name, and counts as seen when every class so named lacks `name`."""
    unknown: list[str] = []
    fallback = False
    for sym, spelled, cls in _ancestors_with_spelling(info):
        if sym.kind == "class" and project.class_of(sym) is not None:
            fallback = fallback or sym.via == "short-name"
            continue
        if spelled in external or sym.name in external or sym.name.rsplit(".", 1)[-1] in external and sym.kind == "external":
            continue
        if spelled and absent(cls.module, spelled):
            continue  # a vLLM class no bundled model holds: it has no such member
        if sym.kind == "unknown" and spelled:
            # nothing binds the name: the short-name fallback
            found = project.short_name(spelled.rsplit(".", 1)[-1], "class")
            if found and all(_lacks(project, s, name) for s in found):
                fallback = True
                continue
        unknown.append(spelled or "?")
    return unknown, fallback


def _ancestors_with_spelling(info: ClassInfo) -> list:
    """(symbol, spelling, the class that spells it) of every base in the MRO: resolved
    classes (marked by kind) and the bases that could not be resolved."""
    out = []
    seen = set()
    for cls in info.classes():
        for spelled, sym in zip(cls.base_spellings(), cls.bases()):
            key = (sym.name, spelled)
            if key in seen:
                continue
            seen.add(key)
            out.append((sym, spelled, cls))
    return out


def _lacks(project: Project, sym, name: str) -> bool:
    cls = project.class_of(sym)
    if cls is None:
        return False
    _, _, has = cls.lookup(name)
    return not has and not cls.has_unresolved_base()
