"""What a rule is handed: one definition of a linted file, with the project around it."""

from __future__ import annotations

import ast
from functools import cached_property
from typing import TYPE_CHECKING, Callable

from .facts import ref, walk_local
from .flow import Flow
from .project import ClassInfo, FunctionInfo, Module, Project, Scope, Symbol
from .source import Source
from .summaries import Summaries
from .values import Finding as ValueFinding
from .values import LastValues

if TYPE_CHECKING:
    pass

MODULE_CODE = "<module>"


class Span:
    """A position to report that is no node of its own (the name of a class or function)."""

    def __init__(self, lineno: int, col_offset: int, end_lineno: int, end_col_offset: int) -> None:
        self.lineno, self.col_offset = lineno, col_offset
        self.end_lineno, self.end_col_offset = end_lineno, end_col_offset


def name_span(source: Source, node: ast.AST) -> Span:
    """Where the name of a `def`/`class` statement is (ast has no node for it): after its
    keyword, possibly on a continuation line."""
    name = getattr(node, "name", "").encode("utf-8")
    end_line = getattr(node, "end_lineno", None) or node.lineno
    col = node.col_offset
    for line in range(node.lineno, min(end_line, node.lineno + 8) + 1):
        text = source.line_text(line).encode("utf-8")
        at = _word_at(text, name, col)
        if at >= 0:
            return Span(line, at, line, at + len(name))
        col = 0
    return Span(node.lineno, node.col_offset, node.lineno, node.col_offset)


def _word_at(text: bytes, word: bytes, start: int) -> int:
    at = text.find(word, start)
    while at >= 0:
        before = text[at - 1 : at]
        after = text[at + len(word) : at + len(word) + 1]
        if not (before.isalnum() or before == b"_") and not (after.isalnum() or after == b"_"):
            return at
        at = text.find(word, at + 1)
    return -1


class Context:
    """What every view of one run shares: the project, and summaries per depth."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._summaries: dict[int, Summaries] = {}
        self.leftovers: dict[tuple, frozenset] = {}  # function -> returned loop leftovers

    def summaries(self, depth: int = 4) -> Summaries:
        got = self._summaries.get(depth)
        if got is None:
            got = self._summaries[depth] = Summaries(self.project, depth)
        return got


class FunctionView:
    """A function (or a module's top-level code, `qual == "<module>"`) of a linted file."""

    def __init__(self, ctx: Context, module: Module, node: ast.AST, qual: str) -> None:
        self.ctx = ctx
        self.project = ctx.project
        self.module = module
        self.node = node
        self.qual = qual

    @cached_property
    def info(self) -> FunctionInfo | None:
        """The function's facts in the project model (None for module code); built on first
        use, as most functions a rule looks at never need them."""
        if self.qual == MODULE_CODE:
            return None
        return self.module.function(self.qual)

    @property
    def source(self) -> Source:
        return self.module.source

    @property
    def name(self) -> str:
        return self.qual.rsplit(".", 1)[-1]

    def owner(self) -> ClassInfo | None:
        return self.info.owner() if self.info is not None else None

    def scope(self, self_cls: ClassInfo | None = None) -> Scope:
        facts = self.info.facts if self.info is not None else None
        owner = self.owner()
        return Scope(self.module, facts, owner, self_cls or owner)

    def resolve(self, spelled: str | None, self_cls: ClassInfo | None = None) -> Symbol:
        from .project import UNKNOWN

        if not spelled:
            return UNKNOWN
        return self.project.resolve(self.module, spelled, self.scope(self_cls))

    def validates_through(self, call: ast.Call, pos: int | str) -> bool:
        """The function `call` reaches (through the project's imports) validates the value
        it is handed at `pos` (an index into the call's arguments, or a keyword's name): a
        helper such as `_check_types(md)` whose body checks or raises on that parameter."""
        if self.info is None and self.qual != "<module>":
            return False
        callee = ref(call.func)
        if callee is None:
            return False
        summaries = self.ctx.summaries()
        sym = self.resolve(callee)
        fn = summaries.function_for(sym)
        if fn is None:
            return sym.kind == "class" and self._constructor_validates(sym, pos)
        params = fn.facts.params
        if isinstance(pos, str):  # passed by keyword
            return pos in params and summaries.validates(fn, params.index(pos))
        bound = fn.facts.cls is not None and isinstance(call.func, ast.Attribute) and params[:1] in (["self"], ["cls"])
        return summaries.validates(fn, pos + (1 if bound else 0))

    def _constructor_validates(self, sym, pos: int | str) -> bool:
        """A project class whose construction checks the argument at `pos`: its `__init__`
        validates that parameter, or (a dataclass) its `__post_init__` checks the field's
        type (`if not isinstance(self.attn_metadata, T): raise TypeError(...)`)."""
        from .derivations import init_order

        cls = self.project.class_of(sym)
        if cls is None:
            return False
        order = init_order(cls)  # what the call's positional arguments are
        name = pos if isinstance(pos, str) else (order[pos] if pos < len(order) else None)
        if name is None:
            return False
        init = cls.method("__init__")
        if init is not None and init.facts.params:
            params = init.facts.params
            return name in params and self.ctx.summaries().validates(init, params.index(name))
        post = cls.method("__post_init__")
        node = post.node() if post is not None else None
        if node is None or not node.args.args:
            return False
        target = f"{node.args.args[0].arg}.{name}"
        for sub in walk_local(node):
            test = sub.test if isinstance(sub, ast.Assert) else (sub.test if isinstance(sub, ast.If) and any(isinstance(b, ast.Raise) for b in sub.body) else None)
            if test is None:
                continue
            for call in ast.walk(test):
                if isinstance(call, ast.Call) and ref(call.func) in ("isinstance", "type") and call.args and ref(call.args[0]) == target:
                    return True
        return False

    @cached_property
    def flow(self) -> Flow:
        return Flow(self.node)

    def last_values(self, is_validator: Callable[[ast.Call, int | str, tuple[str, ...]], bool] | None = None) -> list[ValueFinding]:
        return LastValues(self.node, is_validator, self.source, self._returned_leftover).run()

    def _returned_leftover(self, call: ast.Call) -> frozenset:
        """Which results of `call` the function it calls left behind from a loop (every
        return agrees): `return per_layer, attn_metadata` after the group loop."""
        spelled = ref(call.func)
        if spelled is None:
            return frozenset()
        fn = self.ctx.summaries().function_for(self._resolve_light(spelled))
        if fn is None:
            return frozenset()
        def compute() -> frozenset:
            node = fn.node()
            if node is None:
                return frozenset()
            lv = LastValues(node, None, fn.module.source)
            lv.run()
            return frozenset.intersection(*lv.returns_leftover) if lv.returns_leftover else frozenset()

        return self.project.tracker.memo(self.ctx.leftovers, (str(fn.module.path), fn.qual), compute)

    def _resolve_light(self, spelled: str) -> Symbol:
        """`resolve`, without computing this function's facts when its head name is not a
        local of it: the module's names and the method's class answer (a long function's
        facts are not worth one callee)."""
        head = spelled.split(".", 1)[0]
        if self.qual == MODULE_CODE or head in self._locals:
            return self.resolve(spelled)
        cls_qual = self.qual.rpartition(".")[0]
        cls = self.module.klass(cls_qual) if cls_qual else None
        if cls is not None and head == self._first_param and "." in spelled:
            # `self.build(...)`: an attribute of the instance, through the class
            sym = Symbol("instance", cls.name, cls.module, cls.qual, "local")
            for part in spelled.split(".")[1:]:
                if not sym.is_known:
                    break
                sym = self.project.attribute(sym, part)
            return sym
        return self.project.resolve(self.module, spelled, Scope(self.module, None, cls, cls))

    @cached_property
    def _first_param(self) -> str | None:
        args = getattr(self.node, "args", None)
        if not isinstance(args, ast.arguments) or any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in self.node.decorator_list):
            return None
        params = args.posonlyargs + args.args
        return params[0].arg if params else None

    @cached_property
    def _locals(self) -> frozenset[str]:
        """The names the function binds itself, but its first parameter (`self`)."""
        out: set[str] = set()
        args = getattr(self.node, "args", None)
        if isinstance(args, ast.arguments):
            out.update(a.arg for a in args.posonlyargs + args.args + args.kwonlyargs)
            out.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
            out.discard(self._first_param)
        for sub in walk_local(self.node):
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name.split(".")[0]) for a in sub.names)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                out.add(sub.id)
        return frozenset(out)

    def text(self, node: ast.AST) -> str:
        return self.source.segment(node)

    def name_span(self, node: ast.AST | None = None) -> Span:
        return name_span(self.source, node if node is not None else self.node)


class ClassView:
    def __init__(self, ctx: Context, module: Module, node: ast.ClassDef, info: ClassInfo) -> None:
        self.ctx = ctx
        self.project = ctx.project
        self.module = module
        self.node = node
        self.info = info

    @property
    def source(self) -> Source:
        return self.module.source

    @property
    def qual(self) -> str:
        return self.info.qual

    def text(self, node: ast.AST) -> str:
        return self.source.segment(node)

    def name_span(self, node: ast.AST | None = None) -> Span:
        return name_span(self.source, node if node is not None else self.node)
