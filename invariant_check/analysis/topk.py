"""Top-k index sharing: which objects a reuse switch can concern, and what compacts a buffer.

MTP index sharing keeps one top-k buffer per attention layer (`topk_indices_buffer`); a
switch (`set_skip_topk(True)`) makes later draft steps reuse it, and a compaction
(`compact_topk_indices(rows)`) moves the rows they read to the front. Rules about it ask:

- `TopkRoles.of_class(cls)`: can an instance of this class hold a shared top-k buffer?
  `HOLDER` when the class (or a base) defines the compaction, names a buffer attribute
  (`*topk_indices*`), or builds in `__init__` an object of a class that does ("through its
  layers"); `NONE` when it provably does not; `UNKNOWN` otherwise. `NONE` needs every base to
  be known (read from the project, the environment or the bundled models, or one of the
  `inert` bases such as `nn.Module`) and either
  - the switch only sets flags on the object itself that the class's own code reads in its
    conditions and nowhere else (a sampler's `self.skip_topk = skip`, tested in `forward`),
    and its `__init__` builds only objects known to hold none (no layers of unknown
    classes, no objects a project function returns), or
  - a class from outside the project that has no switch at all, or (with `closed_world`) a
    class of a module of the modelled releases (`MODULES.txt`) that the bundled models do not
    hold: the models hold every class of those releases that defines the switch or the
    compaction, names a buffer, or subclasses one that does (`scripts/gen_models.py`).
  A switch with only a declaration for a body (`...`, `pass`, `raise NotImplementedError`,
  a Protocol's) leaves the class `UNKNOWN`: the implementation is elsewhere.
- `TopkRoles.of_receiver(view, spelled)`: the same for the object a call is made on
  (`self.model.model`, `self.sampler`, a parameter, a local alias), resolved through
  imports, annotations and `self.x = Cls(...)` assignments; `UNKNOWN` where nothing tells.
  A class known only from an annotation is read as it is declared, except that a vLLM class
  missing from the models says nothing there (the object may be of a plugin's subclass).
- `topk_gathers(func, buffers)`: the statements and calls of a function that gather the rows
  of a top-k buffer in place (`buf[:n] = buf[idx]`, `buf.narrow(0, 0, n).copy_(buf.index_select(0, idx))`,
  ...), through what its locals hold (`analysis/gathers.py`): a gather into a copy of the
  buffer (`tmp = buf.clone()`) compacts nothing shared. `gathered_topk(node, aliases,
  buffers)`: the same for one node, through a map of aliases.
- `TopkRoles.compaction(cls)`: how an instance has the compaction: a method that does
  something (`METHOD`), a callable bound to every instance in `__init__` (`INSTANCE`), an
  enforced `@abstractmethod` (`ABSTRACT`), or a body that only declares it (`PLACEHOLDER`:
  `...`, `pass`, a docstring, `raise NotImplementedError`, a Protocol's stub), which compacts
  nothing. A placeholder is no evidence that the class holds a buffer.
- `declares_only(node)`: a function whose body only declares it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .facts import FUNCS, child_nodes, gathered_buffer, last_name, ref, walk_local
from .gathers import gathers_in, made_by_call
from .needs import Names
from .project import ClassInfo, Module, Project, Scope

HOLDER, NONE, UNKNOWN = "holder", "none", "unknown"

# bases that hold no top-k buffer and define no switch: Python's and torch's roots
INERT_BASES = frozenset({
    "object", "builtins.object", "Module", "nn.Module", "torch.nn.Module", "torch.nn.modules.module.Module",
    "ABC", "abc.ABC", "Protocol", "typing.Protocol", "typing_extensions.Protocol", "Generic", "typing.Generic",
})
CONSTRUCTION_DEPTH = 3  # how many `__init__` constructions deep "through its layers" looks
# packages whose objects hold no top-k buffer of a model (tensors, containers, Python's own)
_DATA_PACKAGES = frozenset({"torch", "builtins", "numpy", "math", "collections", "dataclasses", "typing", "functools", "itertools"})


@dataclass(frozen=True)
class TopkNames:
    """The names a rule uses: the switch, the compaction, the buffer globs; which bases are
    inert; and whether the bundled models list every holder of their package (true when the
    names are the ones the models were generated with)."""

    switch: str
    compaction: str
    buffers: Names
    inert: frozenset[str] = INERT_BASES
    closed_world: bool = True


class TopkRoles:
    """Answers for one project; results are memoised per class."""

    def __init__(self, project: Project, names: TopkNames) -> None:
        self.project = project
        self.names = names
        self._classes: dict[tuple, str] = {}

    # -- classes ---------------------------------------------------------------------------
    def of_class(self, cls: ClassInfo, depth: int = CONSTRUCTION_DEPTH) -> str:
        key = (str(cls.module.path), cls.qual, depth)
        got = self._classes.get(key)
        if got is None:
            self._classes[key] = UNKNOWN  # a class that builds itself
            got = self._classes[key] = self._of_class(cls, depth)
        return got

    def _of_class(self, cls: ClassInfo, depth: int) -> str:
        classes: list[ClassInfo] = []
        unknown_base = False
        for info in cls.classes():
            if self._inert(info.name):
                continue
            classes.append(info)
            for spelled, sym in zip(info.base_spellings(), info.bases()):
                if sym.kind == "class" and self.project.class_of(sym) is not None:
                    continue
                if self._inert(spelled) or self._inert(sym.name) or sym.kind == "external" and self._inert(sym.name.rsplit(".", 1)[-1]):
                    continue
                # a base nothing reads (a vLLM class outside the models holds no buffer
                # itself, but may build layers that do)
                unknown_base = True
        if not classes:
            return UNKNOWN  # an inert class itself (a declared `nn.Module`)
        if any(self._holds(info, depth) for info in classes):
            return HOLDER
        if unknown_base:
            return UNKNOWN
        owner, _, found = cls.lookup(self.names.switch)
        if not found or owner is None:
            if cls.module.origin != "project" and not any("__getattr__" in c.own_members() for c in classes):
                return NONE  # an upstream class without the switch
            return UNKNOWN
        return NONE if self._contained(cls, classes) and self._builds_nothing_unknown(classes, depth) else UNKNOWN

    def _builds_nothing_unknown(self, classes: list[ClassInfo], depth: int) -> bool:
        """Whether every call in the `__init__` of these classes builds an object known to
        hold no top-k buffer (a class whose role is `NONE`, torch's and Python's own), so
        that what the flag's conditions guard cannot reach one through a layer."""
        for info in classes:
            if "__init__" not in info.own_members():
                continue
            init = info.module.function(f"{info.qual}.__init__")
            if init is None:
                return False
            scope = Scope(info.module, init.facts, info, info)
            for call in init.facts.calls:
                if call.ref and call.ref.startswith("super()"):
                    continue
                if not call.ref or depth <= 0:
                    return False
                sym = self.project.resolve(info.module, call.ref, scope)
                outside = sym.module is None or sym.module.origin != "project"
                if outside and sym.kind in ("external", "function", "class") and sym.name.split(".", 1)[0] in _DATA_PACKAGES:
                    continue  # a tensor, a container, a torch module
                if sym.kind != "class":
                    return False
                sub = self.project.class_of(sym)
                if sub is None or not self._inert(sub.name) and self.of_class(sub, depth - 1) != NONE:
                    return False
        return True

    def _holds(self, info: ClassInfo, depth: int) -> bool:
        """Evidence in one class's own code: it defines the compaction (a body that does
        something), names a buffer, or builds in `__init__` an object of a class that holds
        one."""
        if self.names.compaction in info.own_members() and member_kind(info, self.names.compaction) != PLACEHOLDER:
            return True
        chunks = info.module.class_chunks(info.qual)
        if chunks:
            text = info.module.source.text
            top = chunks[0]
            if self.names.buffers.holds(text, top.start, max(top.end, top.span_end)):
                return True
        if depth <= 0 or "__init__" not in info.own_members():
            return False
        init = info.module.function(f"{info.qual}.__init__")
        if init is None:
            return False
        scope = Scope(info.module, init.facts, info, info)
        for call in init.facts.calls:
            if not call.ref or call.ref.startswith(("super()", "self.")):
                continue
            sym = self.project.resolve(info.module, call.ref, scope)
            sub = self.project.class_of(sym) if sym.kind == "class" else None
            if sub is not None and not self._inert(sub.name) and self.of_class(sub, depth - 1) == HOLDER:
                return True
        return False

    def _contained(self, cls: ClassInfo, classes: list[ClassInfo]) -> bool:
        """The switch sets only flags of the object itself (through `super()` too), and the
        class's own code reads each flag, only in conditions."""
        flags: set[str] = set()
        at = cls
        for _ in range(len(classes) + 1):
            owner, value, found = at.lookup(self.names.switch)
            if not found or owner is None or value is not None:
                return False
            fn = owner.module.function(f"{owner.qual}.{self.names.switch}")
            node = fn.node() if fn is not None else None
            if node is None:
                return False
            own, delegates = _flag_writes(node, self.names.switch)
            if own is None:
                return False
            flags |= own
            if not delegates:
                break
            mro = cls.classes()
            later = mro[mro.index(owner) + 1 :] if owner in mro else []
            nxt = next((c for c in later if self.names.switch in c.own_members()), None)
            if nxt is None:
                return False
            at = nxt
        else:
            return False
        if not flags:
            return False
        read: set[str] = set()
        for info in classes:
            for name, value in info.own_members().items():
                if value is not None or name == self.names.switch:
                    continue
                fn = info.module.function(f"{info.qual}.{name}")
                node = fn.node() if fn is not None else None
                if node is None:
                    continue
                tested, other = _flag_reads(node, flags)
                if other:
                    return False
                read |= tested
        return flags <= read

    def _inert(self, name: str | None) -> bool:
        return bool(name) and name in self.names.inert

    # -- the compaction ---------------------------------------------------------------------
    def compaction(self, cls: ClassInfo) -> tuple[str | None, ClassInfo | None]:
        """(how an instance of `cls` has the compaction, the class that gives it): `METHOD`
        (a method or a class attribute along the MRO), `INSTANCE` (bound to every instance in
        an `__init__`: `self.compact_topk_indices = functools.partial(...)`), `ABSTRACT` (an
        `@abstractmethod` of an ABC or a Protocol: the class cannot be instantiated until a
        subclass implements it), `PLACEHOLDER` (a method whose body only declares it: `...`,
        `pass`, a docstring, `raise NotImplementedError`, an unimplemented Protocol member;
        calling it compacts nothing), or None."""
        name = self.names.compaction
        owner, _, found = cls.lookup(name)
        if found and owner is not None:
            kind = member_kind(owner, name)
            if kind == PLACEHOLDER and set_in_init(cls, name):
                return INSTANCE, cls
            return kind, owner
        if set_in_init(cls, name):
            return INSTANCE, cls
        return None, None

    # -- outside the project -----------------------------------------------------------------
    def absent_upstream(self, module: Module, spelled: str, scope: Scope | None, depth: int = 0) -> bool:
        """Whether `spelled` names, through an import, a class of a modelled package that the
        bundled models do not hold (with `closed_world`): such a class holds no top-k buffer
        and defines neither the switch nor the compaction in any release modelled. Imports
        re-exported by a project module (a plugin's `compat.py`) are followed."""
        if not self.names.closed_world or depth > 8:
            return False
        env = self.project.env
        if env.models is None:
            return False
        sym = self.project.resolve(module, spelled, scope)
        if sym.kind == "external":
            # a module of the releases that has no model: `from vllm.v1.sample... import X`
            known = modelled_modules(env.models)
            mod = sym.name.rpartition(".")[0]
            return mod in known
        if sym.kind != "unknown":
            return False
        # `from pkg.mod import Cls` where the model of `pkg.mod` has no `Cls`
        head, _, rest = spelled.partition(".")
        hows = module.bindings().bindings.get(head) or []
        if scope is not None and scope.function is not None and head in scope.function.imports:
            hows = [scope.function.imports[head]]
        for how in reversed(hows):
            if how[0] == "from":
                target = self.project.relative_module(module, how[1], how[2]) if how[1] else self.project.find_module(how[2], module)
                if target is not None and target.origin == "project" and target is not module:
                    return self.absent_upstream(target, how[3] + (f".{rest}" if rest else ""), None, depth + 1)
                if how[1] or target is None or target.origin != "bundled" or rest:
                    return False
                return how[3] not in target.bindings().bindings and self.project.find_module(f"{how[2]}.{how[3]}", module, probe=True) is None
            if how[0] == "module" and rest:
                parts = spelled.split(".")
                for i in range(len(parts) - 1, 0, -1):
                    target = self.project.find_module(".".join(parts[:i]), module, probe=True)
                    if target is not None:
                        return target.origin == "bundled" and i == len(parts) - 1 and parts[-1] not in target.bindings().bindings
                return False
        return False

    # -- receivers ----------------------------------------------------------------------------
    def of_receiver(self, view, spelled: str | None) -> str:
        """The role of the object `spelled` names in a function (a `FunctionView`)."""
        if not spelled:
            return UNKNOWN
        sym = view.resolve(spelled)
        if sym.kind in ("instance", "class"):
            cls = self.project.class_of(sym)
            return self.of_class(cls) if cls is not None else UNKNOWN
        if sym.kind == "external":
            return NONE if self.absent_upstream(view.module, spelled, view.scope()) else UNKNOWN
        head, _, attr = spelled.rpartition(".")
        if head and attr:
            owner = view.resolve(head)
            cls = self.project.class_of(owner) if owner.kind == "instance" else None
            if cls is not None:
                return self._of_attribute(cls, attr)
        return UNKNOWN

    def _of_attribute(self, cls: ClassInfo, attr: str) -> str:
        """`self.<attr>` of an instance of `cls`, from the `self.<attr> = ...` assignments in
        the methods of its classes: each a construction of a class whose role is known."""
        roles: list[str] = []
        for info in cls.classes():
            text = info.module.source.text
            for chunk in info.module.class_chunks(info.qual):
                if f"self.{attr}" not in text[chunk.start : chunk.end] and attr not in text[chunk.start : chunk.end]:
                    continue
                for fn in info.module.chunk_facts(chunk).functions.values():
                    how = fn.self_attrs.get(attr)
                    if how is None:
                        continue
                    kind, target = how
                    scope = Scope(info.module, fn, info, cls)
                    if kind != "new":
                        # a value handed in: its annotation declares a class, the object may
                        # be of any subclass
                        roles.append(UNKNOWN)
                        continue
                    sym = self.project.resolve(info.module, target, scope)
                    sub = self.project.class_of(sym) if sym.kind == "class" else None
                    if sub is not None:
                        roles.append(self.of_class(sub))
                    elif self.absent_upstream(info.module, target, scope):
                        roles.append(NONE)
                    else:
                        roles.append(UNKNOWN)
        if not roles:
            return UNKNOWN
        if HOLDER in roles:
            return HOLDER
        return NONE if all(r == NONE for r in roles) else UNKNOWN


@lru_cache(maxsize=4)
def modelled_modules(models: Path) -> frozenset[str]:
    """Every module of the releases the bundled models were generated from (`MODULES.txt`)."""
    try:
        text = (models / "MODULES.txt").read_text("utf-8")
    except OSError:
        return frozenset()
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


# -- syntax ------------------------------------------------------------------------------------


def topk_gathers(func: ast.AST, buffers: Names, made=None) -> set[int]:
    """`id(node)` of each statement or call of a function that gathers the rows of a top-k
    buffer in place: of an object named like `buffers`, through the function's locals, never
    of a copy of one (`analysis/gathers.py`). `made(kind, func)`: the objects a call of a
    project function hands out (`Summaries.made_by`), for a local bound to what one returns
    or yields (`for buf in _indexer_buffers(model):`)."""
    def named(h: str) -> bool:
        if not h.startswith("<"):
            return buffers.matches(h.rsplit(".", 1)[-1])
        got = made_by_call(h) if made is not None else None
        return got is not None and any(buffers.matches((r + got[2]).rsplit(".", 1)[-1]) for r in made(got[0], got[1]))

    return {key for key, held in gathers_in(func).items() if any(named(h) for h in held)}


def gathered_topk(node: ast.AST, aliases: dict[str, str], buffers: Names) -> str | None:
    """The top-k buffer whose rows `node` (an assignment or a `copy_` call) gathers in place,
    through local aliases given as a map (`buf = layer.indexer.topk_indices_buffer`); None if
    none. `topk_gathers` answers for a whole function, through all its bindings."""
    buf = gathered_buffer(node)
    if buf is None:
        return None
    for _ in range(8):
        head, dot, rest = buf.partition(".")
        target = aliases.get(head)
        if target is None or target == head:
            break
        buf = target + dot + rest
    return buf if buffers.matches(buf.rsplit(".", 1)[-1]) else None


METHOD, INSTANCE, ABSTRACT, PLACEHOLDER = "method", "instance", "abstract", "placeholder"
# bases whose metaclass enforces `@abstractmethod` (`ABCMeta`, a Protocol's)
_ABSTRACT_BASES = frozenset({"ABC", "Protocol"})


def member_kind(owner: ClassInfo, name: str) -> str:
    """How a member a class defines itself behaves when called: `METHOD` (a body that does
    something, a class attribute bound to a function, a bundled model's method whose body is
    not modelled), `ABSTRACT` (an `@abstractmethod` of a class whose metaclass enforces it),
    or `PLACEHOLDER` (a body that only declares it)."""
    value = owner.own_members().get(name)
    if value is not None:
        return METHOD
    if name not in owner.facts.methods and bound_to_none(owner, name):
        return PLACEHOLDER  # `compact_topk_indices = None` in the class body: nothing to call
    fn = owner.module.function(f"{owner.qual}.{name}")
    if fn is None or fn.opaque:
        return METHOD  # defined on every branch of an `if`, or not modelled: taken as real
    node = fn.node()
    if node is None or not declares_only(node):
        return METHOD
    if any(last_name(d) == "abstractmethod" for d in getattr(node, "decorator_list", [])) and _abstract_enforced(owner):
        return ABSTRACT
    return PLACEHOLDER


def bound_to_none(owner: ClassInfo, name: str) -> bool:
    """The class body binds `name = None` (or `name: T = None`)."""
    text = owner.module.source.text
    pattern = re.compile(rf"^[ \t]+{re.escape(name)}[ \t]*(?::[^=\n]*)?=[ \t]*None[ \t]*(?:#.*)?$", re.M)
    for chunk in owner.module.class_chunks(owner.qual):
        if pattern.search(text, chunk.start, chunk.end):
            return True
    return False


def _abstract_enforced(cls: ClassInfo) -> bool:
    """Whether the class's metaclass enforces `@abstractmethod`: it derives from `ABC`, a
    `Protocol`, or names `ABCMeta` as its metaclass (itself or a base)."""
    for info in cls.classes():
        if any(s and s.rsplit(".", 1)[-1] in _ABSTRACT_BASES for s in info.base_spellings()):
            return True
        chunks = info.module.class_chunks(info.qual)
        if chunks:
            head = info.module.source.text[chunks[0].start : chunks[0].start + 400].split(":", 1)[0]
            if "ABCMeta" in head:
                return True
    return False


def set_in_init_on_some_paths(cls: ClassInfo, name: str) -> bool:
    """Whether an `__init__` of the class or a base stores `self.<name>` at all."""
    for info in cls.classes():
        fn = info.module.function(f"{info.qual}.__init__") if "__init__" in info.own_members() else None
        if fn is not None and fn.facts.params and any(st.target == fn.facts.params[0] and st.attr == name and st.op == "=" for st in fn.facts.stores):
            return True
    return False


def set_in_init(cls: ClassInfo, name: str) -> bool:
    """Whether an `__init__` of the class or a base binds `self.<name>`, on every path through
    it, to a value that is not a literal (`self.compact = functools.partial(...)`, `=
    self._gather`, `= lambda ...`): every instance then has that attribute, as if it were a
    method. A binding under an `if` of one branch leaves the other instances without it."""
    for info in cls.classes():
        if "__init__" not in info.own_members():
            continue
        fn = info.module.function(f"{info.qual}.__init__")
        if fn is None or not fn.facts.params:
            continue
        me = fn.facts.params[0]
        if not any(st.target == me and st.attr == name and st.op == "=" for st in fn.facts.stores):
            continue
        node = fn.node()

        def binds(sub: ast.stmt) -> bool:
            if isinstance(sub, (ast.Assign, ast.AnnAssign)) and sub.value is not None and not isinstance(sub.value, ast.Constant):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                return any(isinstance(t, ast.Attribute) and t.attr == name and isinstance(t.value, ast.Name) and t.value.id == me for t in targets)
            return False

        if node is not None and _on_every_path(node.body, binds):
            return True
    return False


def _on_every_path(stmts: list[ast.stmt], test) -> bool:
    """Whether every path through the block runs a statement for which `test` holds before
    it returns (an `if` counts when both its branches do; the bodies of `with` and `try` run;
    a path that raises makes no instance and needs none; an early `return`, also one from a
    loop, leaves without it)."""
    outcomes = _outcomes(stmts, test)
    return "bound" in outcomes and not outcomes - {"bound"}


def _outcomes(stmts: list[ast.stmt], test) -> set[str]:
    """How the paths through a block end: "bound" (a statement `test` holds for ran),
    "return" (left without one), "through" (fell off the end without one)."""
    out: set[str] = set()
    for st in stmts:
        if test(st):
            out.add("bound")
            return out
        if isinstance(st, ast.Return):
            out.add("return")
            return out
        if isinstance(st, ast.Raise):
            return out
        if isinstance(st, ast.If):
            sub = _outcomes(st.body, test) | _outcomes(st.orelse, test)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            sub = _outcomes(st.body, test)
        elif isinstance(st, ast.Try):
            if st.finalbody and _outcomes(st.finalbody, test) == {"bound"}:
                sub = {"bound"}
            else:
                sub = _outcomes(st.body, test)
                for h in st.handlers:
                    sub |= _outcomes(h.body, test)
                if st.orelse and "through" in sub:
                    sub = (sub - {"through"}) | _outcomes(st.orelse, test)
        elif isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
            # its body may not run: a binding there does not count, a `return` there does
            sub = {"through"}
            if any(isinstance(n, ast.Return) for n in _walk_local_stmts(st.body + st.orelse)):
                sub.add("return")
        else:
            continue
        out |= sub - {"through"}
        if "through" not in sub:
            return out
    out.add("through")
    return out


def _walk_local_stmts(stmts: list[ast.stmt]):
    """The nodes of a block, not those of functions or classes defined in it."""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.append(child)


def declares_only(node: ast.AST) -> bool:
    """A function whose body only declares it: docstring, `...`, `pass`, `raise
    NotImplementedError`, `return`/`return None`, a log line or warning (a TODO stub that
    says it does nothing yet)."""
    body = list(getattr(node, "body", []))
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]
    for st in body:
        if isinstance(st, ast.Pass):
            continue
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and st.value.value is Ellipsis:
            continue
        if isinstance(st, ast.Raise) and st.exc is not None:
            exc = st.exc.func if isinstance(st.exc, ast.Call) else st.exc
            if ref(exc) in ("NotImplementedError", "NotImplemented"):
                continue
        if isinstance(st, ast.Return) and (st.value is None or (isinstance(st.value, ast.Constant) and st.value.value is None)):
            continue
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and _logs(st.value):
            continue
        return False
    return True


_LOGGERS = ("logger", "log", "logging", "warnings", "_logger", "LOGGER", "LOG")


def _logs(call: ast.Call) -> bool:
    """`logger.warning(...)`, `warnings.warn(...)`, `print(...)`: says something, does nothing."""
    spelled = ref(call.func) or ""
    return spelled == "print" or spelled.split(".", 1)[0] in _LOGGERS and "." in spelled


def _flag_writes(node: ast.AST, switch: str) -> tuple[set[str] | None, bool]:
    """(attributes of `self` the switch sets, whether it delegates to `super().<switch>`);
    None when it does anything else."""
    if not isinstance(node, FUNCS) or not node.args.args:
        return None, False
    me = node.args.args[0].arg
    flags: set[str] = set()
    delegates = False
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]
    for st in body:
        if isinstance(st, ast.Pass):
            continue
        if isinstance(st, (ast.Assign, ast.AnnAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            value = st.value
            if isinstance(value, ast.Call) and ref(value.func) == "bool" and len(value.args) == 1 and not value.keywords:
                value = value.args[0]  # `self._skip = bool(skip)`: the same flag
            if value is None or any(isinstance(n, ast.Call) for n in ast.walk(value)):
                return None, False
            for t in targets:
                if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me):
                    return None, False
                flags.add(t.attr)
            continue
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and ref(st.value.func) == f"super().{switch}":
            delegates = True
            continue
        return None, False
    return flags, delegates


_TESTS = (ast.If, ast.While, ast.IfExp, ast.Assert)
_LOGIC = (ast.BoolOp, ast.UnaryOp, ast.Compare)


def _flag_reads(node: ast.AST, flags: set[str]) -> tuple[set[str], bool]:
    """(flags read in conditions, whether a flag is read anywhere else: passed on, stored
    elsewhere, returned). Writes of a flag (`self.skip_topk = False` in `__init__`) keep it
    in the object."""
    if not isinstance(node, FUNCS) or not node.args.args:
        return set(), False
    me = node.args.args[0].arg
    parents: dict[int, ast.AST] = {}
    for parent in ast.walk(node):
        for child in child_nodes(parent):
            parents[id(child)] = parent
    # locals bound once, to a flag (`skip = self.skip_topk`): read as the flag itself
    bound: dict[str, int] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            bound[sub.id] = bound.get(sub.id, 0) + 1
    copies: dict[str, str] = {}
    tested: set[str] = set()

    def in_test(sub: ast.AST) -> bool:
        child, parent = sub, parents.get(id(sub))
        while isinstance(parent, _LOGIC):
            child, parent = parent, parents.get(id(parent))
        return isinstance(parent, _TESTS) and getattr(parent, "test", None) is child

    for sub in ast.walk(node):
        if not (isinstance(sub, ast.Attribute) and sub.attr in flags and isinstance(sub.value, ast.Name) and sub.value.id == me):
            continue
        if not isinstance(sub.ctx, ast.Load):
            continue
        parent = parents.get(id(sub))
        if (
            isinstance(parent, ast.Assign) and parent.value is sub and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Name) and bound.get(parent.targets[0].id) == 1
        ):
            copies[parent.targets[0].id] = sub.attr
        elif in_test(sub):
            tested.add(sub.attr)
        else:
            return tested, True
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id in copies:
            if not in_test(sub):
                return tested, True
            tested.add(copies[sub.id])
    return tested, False


__all__ = [
    "ABSTRACT",
    "HOLDER",
    "INSTANCE",
    "METHOD",
    "PLACEHOLDER",
    "member_kind",
    "set_in_init",
    "INERT_BASES",
    "NONE",
    "UNKNOWN",
    "TopkNames",
    "TopkRoles",
    "declares_only",
    "gathered_topk",
    "topk_gathers",
]
