"""Transitive facts of functions across modules: does calling it compact, run a forward,
validate its parameter, write fields of its argument?

A call is followed into the function it resolves to (through imports, `self`/`super()` and
the class of the instance, `self.f = func` and `functools.partial(func, ...)` bindings, class
attributes bound to functions, `staticmethod(func)`), up to `depth` calls deep; cycles stop.
A call of an instance attribute bound to a method of another object (`self.f =
functools.partial(self.model.g, ...)`, `self.f = self.model.g`) is a call of that method
(`bound_call`). Methods are resolved
for the class `self` really is: a hook a base class's `propose()` calls is the subclass's
override when the question is about the subclass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from .facts import CallFact, FunctionFacts
from .project import UNKNOWN, ClassInfo, FunctionInfo, Project, Scope, Symbol

CallTest = Callable[[CallFact], bool]


@dataclass(frozen=True)
class Callee:
    call: CallFact
    symbol: Symbol
    function: FunctionInfo | None


class Summaries:
    def __init__(self, project: Project, depth: int = 4) -> None:
        self.project = project
        self.depth = depth
        self._callees: dict[tuple, list[Callee]] = {}
        self._memo: dict[tuple, bool] = {}
        self._made: dict[tuple, frozenset] = {}
        self._fields: dict[tuple, frozenset] = {}

    # -- resolution of one call --------------------------------------------------------------
    def scope(self, fn: FunctionInfo, self_cls: ClassInfo | None = None) -> Scope:
        owner = fn.owner()
        return Scope(fn.module, fn.facts, owner, self_cls or owner)

    def resolve(self, fn: FunctionInfo, spelled: str | None, self_cls: ClassInfo | None = None) -> Symbol:
        if not spelled:
            return UNKNOWN
        return self.project.resolve(fn.module, spelled, self.scope(fn, self_cls))

    def callees(self, fn: FunctionInfo, self_cls: ClassInfo | None = None) -> list[Callee]:
        key = (fn.module.path, fn.qual, self_cls.name if self_cls else None)
        fn.module._touch()

        def compute() -> list[Callee]:
            out = []
            for call in fn.facts.calls:
                sym = self.resolve(fn, call.ref, self_cls)
                out.append(Callee(call, sym, self.function_for(sym)))
            return out

        return self.project.tracker.memo(self._callees, key, compute)

    def function_for(self, sym: Symbol) -> FunctionInfo | None:
        """The function a call of `sym` runs: a function, or `__call__`/`forward` of an
        instance is not followed (a model's forward is judged by name)."""
        if sym.kind == "function":
            return self.project.function_of(sym)
        return None

    # -- transitive questions ------------------------------------------------------------------
    def reaches(
        self,
        fn: FunctionInfo,
        test: CallTest,
        key: str,
        self_cls: ClassInfo | None = None,
        own: Callable[[FunctionFacts], bool] | None = None,
    ) -> bool:
        """Whether `fn`, or a function it calls (transitively), makes a call that passes `test`
        (or, with `own`, has facts that pass `own`). `key` names the tests for memoisation."""
        memo_key = (fn.module.path, fn.qual, self_cls.name if self_cls else None, key)
        return self.project.tracker.memo(
            self._memo, memo_key, lambda: self._reaches(fn, test, own, self_cls, self.depth, set())
        )

    def _reaches(self, fn, test, own, self_cls, depth, visiting) -> bool:
        # not memoised inside: a result cut short by a cycle holds only for this question
        ident = (fn.module.path, fn.qual)
        if ident in visiting:
            return False
        visiting.add(ident)
        found = own is not None and (own(fn.facts) or self._own_through_made(fn, own, self_cls))
        if not found:
            found = any(test(callee.call) for callee in self.callees(fn, self_cls))
        if not found:
            found = any(test(bound) for bound in self._bound_calls(fn, self_cls))
        if not found and depth > 0:
            for callee in self.callees(fn, self_cls):
                target = callee.function
                if target is None:
                    continue
                sub_self = self_cls if _same_instance(callee.call) else target.owner()
                if self._reaches(target, test, own, sub_self, depth - 1, visiting):
                    found = True
                    break
        visiting.discard(ident)
        return found

    def made_by(self, fn: FunctionInfo, kind: str, func: str, self_cls: ClassInfo | None = None) -> frozenset[str]:
        """The objects a call of `func` in `fn` hands out (`kind`: `gathers.ENTRIES_OF`, what
        it yields or the entries of what it returns; `gathers.VALUE_OF`, what it returns), as
        the callee spells them: empty when the callee is not a project function."""
        from .gathers import handed_out

        key = (fn.module.path, fn.qual, self_cls.name if self_cls else None, kind, func)

        def compute() -> frozenset[str]:
            target = self.function_for(self.resolve(fn, func, self_cls))
            node = target.node() if target is not None else None
            if node is None:
                return frozenset()
            return frozenset(handed_out(node, kind))

        return self.project.tracker.memo(self._made, key, compute)

    def _own_through_made(self, fn: FunctionInfo, own: Callable[[FunctionFacts], bool], self_cls: ClassInfo | None) -> bool:
        """`own` asked of what `fn` gathers as the objects a function it calls hands out
        (`for buf in _indexer_buffers(model): buf[:n] = buf[idx]`)."""
        from dataclasses import replace

        from .gathers import made_by_call

        held = []
        for g in fn.facts.gathers:
            made = made_by_call(g)
            if made is not None:
                kind, func, rest = made
                held.extend(r + rest for r in self.made_by(fn, kind, func, self_cls))
        return bool(held) and own(replace(fn.facts, gathers=held))

    def bound_call(self, fn: FunctionInfo, call: CallFact, self_cls: ClassInfo | None = None) -> CallFact | None:
        """The call `self.<attr>(...)` makes when a method bound the attribute to a callable
        of another object (`self.f = functools.partial(self.model.g, x)`, `self.f =
        self.model.g`): a call of `self.model.g`, with the arguments of this call; None
        otherwise (and for an attribute that resolves to a function, which is followed)."""
        spelled = call.ref or ""
        head, dot, attr = spelled.partition(".")
        if not dot or "." in attr or not fn.facts.params or head != fn.facts.params[0]:
            return None
        cls = self_cls or fn.owner()
        if cls is None:
            return None
        target = cls.bound_callable(attr)
        if target is None:
            return None
        recv, _, name = target.rpartition(".")
        return CallFact(name, target, recv or None, call.arg0, call.args, call.kwargs, call.line, call.col)

    def _bound_calls(self, fn: FunctionInfo, self_cls: ClassInfo | None) -> Iterator[CallFact]:
        for callee in self.callees(fn, self_cls):
            if callee.function is None and callee.call.ref and callee.call.ref.count(".") == 1:
                bound = self.bound_call(fn, callee.call, self_cls)
                if bound is not None:
                    yield bound

    def validates(self, fn: FunctionInfo, index: int, depth: int | None = None) -> bool:
        """Whether `fn` checks the type of its positional parameter `index` (asserting or
        raising), itself or by passing it on to a function that does."""
        depth = self.depth if depth is None else depth
        params = fn.facts.params
        if index >= len(params):
            return False
        name = params[index]
        if name in fn.facts.validates:
            return True
        if depth <= 0:
            return False
        return any(self.validates(target, at, depth - 1) for target, at in self.passed_on(fn, {name}))

    def passed_on(self, fn: FunctionInfo, names: set[str]) -> Iterator[tuple[FunctionInfo, int]]:
        """(callee, parameter index) for every call in `fn` that passes one of `names` on, by
        position or by keyword."""
        for callee in self.callees(fn):
            target = callee.function
            if target is None:
                continue
            offset = 1 if _is_bound_call(callee, target) else 0
            for pos, arg in enumerate(callee.call.args):
                if arg in names:
                    yield target, pos + offset
            for kw, arg in callee.call.kwargs.items():
                if arg in names and kw in target.facts.params:
                    yield target, target.facts.params.index(kw)

    def fields_written(self, fn: FunctionInfo, index: int, depth: int | None = None) -> frozenset[tuple[str, str, int | None]]:
        """(attribute, op, delta) of every write to an attribute of positional parameter
        `index`, by `fn` or the functions it passes the parameter to."""
        depth = self.depth if depth is None else depth
        return self._fields_written(fn, index, depth, set())

    def _fields_written(self, fn: FunctionInfo, index: int, depth: int, visiting: set) -> frozenset:
        ident = (fn.module.path, fn.qual, index)
        if ident in visiting:
            return frozenset()
        visiting = visiting | {ident}
        params = fn.facts.params
        out: set[tuple[str, str, int | None]] = set()
        if index < len(params):
            name = params[index]
            aliases = {name} | {a for a, v in fn.facts.aliases.items() if v == name}
            for store in fn.facts.stores:
                if store.target in aliases:
                    out.add((store.attr, store.op, store.delta))
            if depth > 0:
                for target, at in self.passed_on(fn, aliases):
                    out |= self._fields_written(target, at, depth - 1, visiting)
        return frozenset(out)


def _same_instance(call: CallFact) -> bool:
    """`self.f(...)` / `super().f(...)`: the callee runs on the same instance."""
    ref = call.ref or ""
    return ref.startswith("self.") and ref.count(".") == 1 or ref.startswith("super().")


def _is_bound_call(callee: Callee, target: FunctionInfo) -> bool:
    """A method called through an instance or class attribute: its first parameter is the
    receiver, not the first argument."""
    return target.facts.cls is not None and callee.call.recv is not None and callee.symbol.kind == "function" and (
        target.facts.params[:1] in (["self"], ["cls"]) or callee.call.recv in ("self", "cls")
    )


def walk_calls(summaries: Summaries, fn: FunctionInfo, depth: int) -> Iterator[tuple[FunctionInfo, CallFact]]:
    """Every call `fn` makes, and those of the functions it calls, `depth` deep."""
    seen = set()
    stack = [(fn, depth)]
    while stack:
        cur, d = stack.pop()
        ident = (cur.module.path, cur.qual)
        if ident in seen:
            continue
        seen.add(ident)
        for callee in summaries.callees(cur):
            yield cur, callee.call
            if d > 0 and callee.function is not None:
                stack.append((callee.function, d - 1))
