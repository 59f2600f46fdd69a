"""Paths around a switch into top-k reuse: does a compaction of the shared buffer, with the
rows of this step, run on every path between the forward before the switch (draft step 0) and
the forward after it (the first step that reuses the buffer)?

`SwitchQuery` names what the question is about (the switch and compaction methods, the calls
that run a forward, the top-k buffer names, how deep helpers are followed, which methods a
framework calls by name). `Window(query, view, flow, call)` is the question for one switch
call; `Window.judge(index)` walks every path of the function's control flow backwards to the
previous forward and forwards to the next one, following calls into project functions,
methods of `self` and its bases (resolved for the subclass), `functools.partial` and
bound-method bindings, and, where a path reaches the start or the end of the function, the
callers the source shows (the methods of the class and its bases that call it, the function a
nested one is defined in).

`assumed_on(view, call)` says when a switch call turns reuse on (a literal `True`, a value the
source reads, a parameter a caller leaves `True`); `bound_switches(view, query, holds_buffer)`
finds the switches bound to an instance attribute and called in a method of the class, each
judged by its `Window` where it is called (`BoundSwitch`).

Any rule may ask these queries; IC002 is the one that reports on them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .facts import call_fact, last_name, literal_kind, ref, returned_def, target_names, walk_local
from .fields import FieldFlow, call_argument
from .flow import ENTRY, EXIT, Flow, atom_source
from .needs import Names, Words
from .objects import _single_bindings, partials, through_partial
from .project import ClassInfo, FunctionInfo
from .returns import returned_after
from .topk import topk_gathers
from .views import FunctionView

CALLER_DEPTH = 2  # how many callers up a window may extend (hook -> propose -> caller)


@dataclass
class SwitchQuery:
    """What a switch window asks about."""

    switch: str = "set_skip_topk"
    compaction: str = "compact_topk_indices"
    forward_names: frozenset = frozenset({"model", "forward", "draft_model", "run_model", "_run_model"})
    depth: int = 4
    buffers: Names = field(default_factory=lambda: Names(["*topk_indices*"], case_sensitive=True))
    entry_points: Names = field(default_factory=lambda: Names(["propose", "forward", "load_model", "dummy_run", "capture", "on_*"], case_sensitive=True))
    buffer_globs: tuple = ("*topk_indices*",)

    @property
    def compacts_key(self) -> str:
        return f"compacts:{self.compaction}:{sorted(self.buffer_globs)}"

    def gathers(self, facts) -> bool:
        """Whether a function gathers the rows of a top-k buffer in place (a compaction
        written out, under any name)."""
        return any(self.buffers.matches(buf.rsplit(".", 1)[-1]) for buf in facts.gathers if not buf.startswith("<"))

    def compacts(self, summaries, fn, self_cls) -> bool:
        """Whether calling `fn` compacts: it calls the compaction method or gathers a top-k
        buffer's rows, itself or in a function it calls."""
        return summaries.reaches(fn, lambda c: c.name == self.compaction, self.compacts_key, self_cls, own=self.gathers)

    def forwards(self, summaries, fn, self_cls) -> bool:
        """Whether calling `fn` runs a draft step."""
        return summaries.reaches(fn, lambda c: c.name in self.forward_names, f"forwards:{sorted(self.forward_names)}", self_cls)


@dataclass
class Verdict:
    ok: bool
    next_forward: str | None = None
    partial: list[str] = field(default_factory=list)  # compactions that miss some path
    via: list[str] = field(default_factory=list)  # callers the window went through
    left_to_guard: bool = False
    # ok only because no caller shows what follows (no draft step after it in the source)
    unseen_callers: bool = False

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.next_forward:
            out["next_forward"] = self.next_forward
        if self.partial:
            out["partial_compactions"] = self.partial
        if self.via:
            out["callers"] = self.via
        return out


class Window:
    """The paths around one switch call, in its function and, where they reach its start or
    end, in its callers."""

    def __init__(
        self,
        rule: SwitchQuery,
        view: FunctionView,
        flow: Flow,
        switch: ast.Call,
        made: ast.Call | None = None,
        receiver: str | None = None,
        assumed: dict[str, bool] | None = None,
        owner: ClassInfo | None = None,
    ) -> None:
        self.assumed = dict(assumed or {})  # what holds when the switch turns reuse on
        self.rule = rule
        self.view = view
        self.flow = flow
        self.switch = switch  # the call in the flow
        made = made if made is not None else switch  # the call of the switch it makes (through a partial)
        self.made = made
        self.summaries = view.ctx.summaries(rule.depth)
        self.receiver = receiver or (ref(made.func.value) if isinstance(made.func, ast.Attribute) else None)
        # `self`'s class: the switch's own, or a project subclass that mixes it in
        self.owner = owner if owner is not None else view.owner()
        self.canon_receiver = canonical_name(self.receiver, dotted_aliases(view.node)) if self.receiver else None
        self._loop_hits: dict[tuple[int, int], bool] = {}
        self._effects: dict[tuple, tuple[str | None, str | None]] = {}
        self._entered_memo: dict[tuple[int, str], ClassInfo | None] = {}  # see `_entered`
        self._known: dict[str, bool] = {}
        self._flow_known: dict[int, dict[str, bool]] = {}
        self._per_function: dict[int, tuple[dict, set[int]]] = {}
        self._caller_of: dict[int, ast.AST] = {}  # id(a call of a project function) -> the function it is in

    def _locals(self, flow: Flow, fn: FunctionInfo | None = None, self_cls: ClassInfo | None = None) -> tuple[dict, set[int]]:
        """(the partials bound to locals, the nodes that gather a top-k buffer in place) of
        the function a flow is of (`fn`, when the project has it: what a call of another
        function hands out is then read there)."""
        key = id(flow.func)
        got = self._per_function.get(key)
        if got is None:
            made = (lambda kind, func: self.summaries.made_by(fn, kind, func, self_cls)) if fn is not None else None
            got = self._per_function[key] = (partials(flow.func), topk_gathers(flow.func, self.rule.buffers, made))
        return got

    # -- classification of one event ----------------------------------------------------------
    def classify(self, node, aliases: dict[str, str], fn: FunctionInfo | None, self_cls: ClassInfo | None, flow: Flow, forward: bool, start: int | None = None) -> str | None:
        if node.kind == "cond":
            return "vacuous" if any(flow.empty(atom) for atom in node.atoms) else None
        if node.kind == "store":
            return "hit" if id(node.node) in self._locals(flow, fn, self_cls)[1] else None
        if node.kind == "join":
            # a `for` loop that runs no forward and compacts (gathers each layer's buffer,
            # skipping those already done) is a compaction, as a helper holding it would be
            loop = flow.loop_at(node.index)
            if loop is None or not isinstance(loop.node, (ast.For, ast.AsyncFor)) or start in loop.members:
                return None
            key = (id(flow), loop.index)
            got = self._loop_hits.get(key)
            if got is None:
                self._loop_hits[key] = False  # a loop inside itself
                seen = flow.iteration(loop, lambda n: self.classify(n, aliases, fn, self_cls, flow, True, start))
                got = self._loop_hits[key] = "hit" in seen and not seen & {"fwd", "mixed", "end"}
            return "hit" if got else None
        if node.kind == "exit":
            return self._exit_effect(fn, node.node, self_cls, forward, self.rule.depth)
        if node.kind == "yield":
            # a `@contextmanager` generator: its caller's `with` block runs here
            return "end" if fn is not None and self._is_context_manager(fn) else None
        if node.kind != "call":
            return None
        call = node.node
        rule = self.rule
        bound, gathers = self._locals(flow, fn, self_cls)
        if id(call) in gathers:
            return "hit"
        call = called_through(call, bound, aliases)
        if fn is not None and call is node.node:
            # `self.f(...)` with `self.f = functools.partial(self.model.model.compact_topk_indices, ...)`
            made = self.summaries.bound_call(fn, call_fact(call), self_cls)
            if made is not None and made.ref:
                call = call_of(made.ref, call)
        name = last_name(call.func)
        if name == rule.switch:
            recv = ref(call.func.value) if isinstance(call.func, ast.Attribute) else None
            if forward and switch_value(call) is False and self._same_model(canonical_name(recv, aliases) if recv else None):
                return "off"
            return None
        if name == rule.compaction:
            recv = ref(call.func.value) if isinstance(call.func, ast.Attribute) else None
            if identity_rows(call, flow.func):
                return None  # rows 0..n-1 gathered onto themselves: nothing moves
            return "hit" if self._same_model(canonical_name(recv, aliases) if recv else None) else None
        callee = ref(call.func)
        if callee is None and isinstance(call.func, ast.Subscript):
            # a module held in a container of the model: `draft_model.mtp_layers[0](...)`
            held = ref(call.func.value)
            held = canonical_name(held, aliases) if held else None
            if held is not None and any(held == o or held.startswith(o + ".") for o in self._owners()):
                return "fwd"
        canon = canonical_name(callee, aliases) if callee else None
        if canon is not None and canon in self._owners():
            return "fwd"
        target = None
        if fn is not None and callee is not None:
            target = self.summaries.function_for(self.summaries.resolve(fn, callee, self_cls))
        if target is None and fn is not None and callee is not None and "." not in callee:
            # `step = self._fused_decode if fused else self._decode; step(...)`: either method
            verdicts = []
            for alt in either_of(flow.func, callee):
                t = self.summaries.function_for(self.summaries.resolve(fn, alt, self_cls))
                owner = self_cls if alt.startswith("self.") else (t.owner() if t is not None else None)
                if t is not None and rule.forwards(self.summaries, t, owner):
                    return "fwd"
                if t is not None:
                    first, last = self.effect(t, owner, call, self._known_for(flow))
                    verdicts.append(first if forward else last)
                else:
                    verdicts.append(None)
            if verdicts and all(v == "hit" for v in verdicts):
                return "hit"  # both helpers compact (`pack = fused if ok else plain; pack(m, rows)`)
        if target is None and fn is not None and callee is not None:
            # `self.compactor(rows)`: an instance of a project class whose `__call__` it defines
            # (a model's call is its forward, judged above by its owner or name)
            inst = self._called_instance(fn, callee, self_cls)
            if inst is not None:
                first, last = self.effect(inst[1], inst[0], call, self._known_for(flow))
                return first if forward else last
        if target is None and fn is not None and callee is not None and callee.count(".") == 1:
            # `with TopkReuseWindow(model) as window: window.pack(rows)`: a method of the
            # context manager, whose `__enter__` returns itself
            held = self._entered(flow, fn, callee.split(".", 1)[0], self_cls)
            method = held.method(callee.split(".", 1)[1]) if held is not None else None
            if method is not None:
                first, last = self.effect(method, held, call, self._known_for(flow))
                return first if forward else last
        if target is None:
            return "fwd" if name in rule.forward_names else None
        sub_self = self_cls if (callee.startswith("self.") and callee.count(".") == 1) or callee.startswith("super().") else target.owner()
        self._caller_of[id(call)] = flow.func
        first, last = self.effect(target, sub_self, call, self._known_for(flow))
        return first if forward else last

    def _entered(self, flow: Flow, fn: FunctionInfo, name: str, self_cls: ClassInfo | None) -> ClassInfo | None:
        """The project class of `with Cls(...) as name:` in the flow's function, where the
        class's `__enter__` returns `self` (so `name` is the instance)."""
        key = (id(flow.func), name)
        if key in self._entered_memo:
            return self._entered_memo[key]
        found = None
        for sub in walk_local(flow.func):
            if not isinstance(sub, (ast.With, ast.AsyncWith)):
                continue
            for item in sub.items:
                if isinstance(item.optional_vars, ast.Name) and item.optional_vars.id == name and isinstance(item.context_expr, ast.Call):
                    sym = self.summaries.resolve(fn, ref(item.context_expr.func), self_cls)
                    cls = self.view.project.class_of(sym) if sym.kind == "class" else None
                    enter = cls.method("__aenter__" if isinstance(sub, ast.AsyncWith) else "__enter__") if cls is not None else None
                    node = enter.node() if enter is not None else None
                    me = node.args.args[0].arg if node is not None and node.args.args else None
                    returns = [r for r in walk_local(node) if isinstance(r, ast.Return)] if me is not None else []
                    if returns and all(isinstance(r.value, ast.Name) and r.value.id == me for r in returns):
                        found = cls
        self._entered_memo[key] = found
        return found

    def _called_instance(self, fn: FunctionInfo, callee: str, self_cls: ClassInfo | None) -> tuple[ClassInfo, FunctionInfo] | None:
        """(its class, its `__call__`) when `callee` names an instance of a project class that
        defines `__call__` itself (not through a base the project does not have); of a
        `torch.nn.Module` subclass, the `forward` it defines (what the module's call runs)."""
        sym = self.summaries.resolve(fn, callee, self_cls)
        if sym.kind != "instance":
            return None
        cls = self.view.project.class_of(sym)
        method = cls.method("__call__") if cls is not None else None
        if method is None and cls is not None and any(_is_torch_module(s) for s in cls.mro()[1:]):
            method = cls.method("forward")
        return (cls, method) if method is not None else None

    def _is_context_manager(self, fn: FunctionInfo) -> bool:
        node = fn.node()
        return node is not None and any(last_name(d) in ("contextmanager", "asynccontextmanager") for d in getattr(node, "decorator_list", []))

    def _switch_compacts(self, fn: FunctionInfo | None) -> bool:
        """Whether the switch call itself compacts: its receiver's switch method (or, when the
        receiver's class cannot be told, the switch method of every project class that
        defines one) compacts with the arguments of this call (`set_skip_topk(True, rows)`
        with `if skip and slot_ids is not None: self.compact_topk_indices(slot_ids)`)."""
        made = self.made
        if fn is None or not isinstance(made.func, ast.Attribute):
            return False
        spelled = ref(made.func)
        target = self.summaries.function_for(self.summaries.resolve(fn, spelled, self.owner)) if spelled else None
        candidates = [target] if target is not None else list(self._switch_methods())
        if not candidates:
            return False
        for method in candidates:
            first, last = self.effect(method, method.owner(), made, self._known)
            if "hit" not in (first, last):
                return False
        return True

    def _switch_methods(self) -> Iterator[FunctionInfo]:
        name = self.rule.switch
        word = Words(name)
        project = self.view.project
        for path in project.files_containing(name):
            module = project.module_at(path)
            for chunk in module.leaf_chunks(word):
                for facts in module.chunk_facts(chunk).functions.values():
                    if facts.cls is not None and facts.qual.rsplit(".", 1)[-1] == name:
                        yield FunctionInfo(module, facts)

    # -- what a call of a project function does, for the arguments of this call -----------------
    def _known_for(self, flow: Flow) -> dict[str, bool]:
        return self._flow_known.get(id(flow), {})

    def effect(self, target: FunctionInfo, sub_self: ClassInfo | None, call: ast.Call | None, known: dict[str, bool], depth: int | None = None,
               leaving: bool = False) -> tuple[str | None, str | None]:
        """(the first, the last) event of a call of `target` that the window cares about:
        'hit' (a compaction), 'fwd' (a draft step) or None, each on some path of its body
        (a compaction on some path counts: the helper's own conditions are its business), with
        the parameters bound as this call binds them (`compact_rows` not passed, so `None`,
        prunes `if compact_rows is not None:`), through the decorators the project defines
        (a wrapper that compacts after the wrapped call returns). Of a `@contextmanager`
        generator, a call runs its body up to the `yield` (the caller's `with` block runs
        there); `leaving`: the part after the `yield`, which runs when the block is left."""
        depth = self.rule.depth if depth is None else depth
        rule = self.rule
        compacts = rule.compacts(self.summaries, target, sub_self) or self._hands_compaction(target, call)
        forwards = rule.forwards(self.summaries, target, sub_self)
        decorated = self._decorators(target)
        if not compacts and not decorated:
            return ("fwd", "fwd") if forwards else (None, None)
        node = target.node()
        if node is None or depth <= 0:
            return ("fwd" if forwards else "hit", "hit") if compacts else (("fwd", "fwd") if forwards else (None, None))
        inner = self._body_effect(target, node, sub_self, call, known, depth, leaving=leaving) if compacts else (("fwd", "fwd") if forwards else (None, None))
        for wrapper, wrapped in decorated:
            inner = self._body_effect(target, wrapper, sub_self, None, {}, depth, wrapped=(wrapped, inner))
        return inner

    def _body_effect(self, target, node, sub_self, call, known, depth, wrapped=None, leaving: bool = False) -> tuple[str | None, str | None]:
        key = (id(node), id(call), tuple(sorted(known.items())), wrapped[1] if wrapped else None, leaving)
        got = self._effects.get(key)
        if got is not None:
            return got
        self._effects[key] = (None, None)  # recursion
        flow = FieldFlow(node)
        bound = bind_params(node, call, known, skip_self=target.facts.cls is not None) if call is not None else {}
        bound = {a: v for a, v in bound.items() if flow.stable((a, v))}
        aliases = dotted_aliases(node)
        gathers = topk_gathers(node, self.rule.buffers, lambda kind, func: self.summaries.made_by(target, kind, func, sub_self))
        local = partials(node)
        rule = self.rule

        # a context manager's `yield` divides its body: up to it runs on entering the `with`
        # block, after it on leaving
        yields = [i for i, n in enumerate(flow.nodes) if n.kind == "yield"] if wrapped is None and self._is_context_manager(target) else []

        def stop(n, forward: bool):
            if n.kind == "cond":
                return "vacuous" if any(flow.empty(atom) for atom in n.atoms) else None
            if n.kind == "store":
                return "hit" if id(n.node) in gathers else None
            if n.kind == "yield" and yields:
                return "yield"
            if n.kind not in ("call", "exit"):
                return None
            c = n.node
            if id(c) in gathers:
                return "hit"
            if wrapped is not None and isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == wrapped[0]:
                first, last = wrapped[1]
                return first if forward else last
            if n.kind == "exit":
                return self._exit_effect(target, c, sub_self, forward, depth)
            if self._calls_passed_compaction(c, target, call):
                return "hit"
            c = called_through(c, local, aliases)
            nm = last_name(c.func)
            if nm == rule.compaction:
                return None if identity_rows(c, node) or self._identity_passed(c, target, call) else "hit"
            if nm == rule.switch:
                return None
            spelled = ref(c.func)
            sub = self.summaries.function_for(self.summaries.resolve(target, spelled, sub_self)) if spelled else None
            if sub is not None:
                s2 = sub_self if (spelled.startswith("self.") and spelled.count(".") == 1) or spelled.startswith("super().") else sub.owner()
                self._caller_of[id(c)] = node
                first, last = self.effect(sub, s2, c, {}, depth - 1)
                return first if forward else last
            return "fwd" if nm in rule.forward_names else None

        if not yields:
            starts = ((True, [ENTRY]), (False, [EXIT]))
        elif leaving:
            starts = ((True, yields), (False, [EXIT]))
        else:
            starts = ((True, [ENTRY]), (False, yields))
        out = []
        for forward, points in starts:
            verdicts: set[str] = set()
            for start in points:
                verdicts |= set(flow.search(start, forward, lambda n, f=forward: stop(n, f), bound, self._assume))
            out.append("hit" if "hit" in verdicts else "fwd" if "fwd" in verdicts else None)
        got = self._effects[key] = (out[0], out[1])
        return got

    def _calls_passed_compaction(self, c: ast.Call, target: FunctionInfo, call: ast.Call | None) -> bool:
        """A call of a parameter the call site passes the compaction for: the bound method
        (`before_first=inner.compact_topk_indices`) or a `functools.partial` of it, written
        in the call or bound to a local of the caller (`pack = partial(inner.compact_topk_indices,
        rows)`, then `runner.run(..., before_first=pack)` and `before_first()` in `run`)."""
        if call is None or not isinstance(c.func, ast.Name) or c.func.id not in target.facts.params:
            return False
        passed = call_argument(call, target, target.facts.params.index(c.func.id))
        return passed is not None and self._is_compaction_callback(passed, self._caller_of.get(id(call)))

    def _hands_compaction(self, target: FunctionInfo, call: ast.Call | None) -> bool:
        """Whether the call passes the compaction for a parameter `target` calls."""
        if call is None:
            return False
        called = {c.ref for c in target.facts.calls if c.ref and "." not in c.ref}
        params = target.facts.params
        for name in called & set(params):
            passed = call_argument(call, target, params.index(name))
            if passed is not None and self._is_compaction_callback(passed, self._caller_of.get(id(call))):
                return True
        return False

    def _is_compaction_callback(self, passed: ast.AST, caller: ast.AST | None) -> bool:
        """The compaction's bound method or a `functools.partial` of it; a local of the
        caller every binding of which (but `None`) is one."""
        if isinstance(passed, ast.Name):
            if caller is None:
                return False
            values = [v for v in _bindings_of(caller, passed.id) if not (isinstance(v, ast.Constant) and v.value is None)]
            return bool(values) and all(v is not None and self._is_compaction_callback(v, None) for v in values)
        if isinstance(passed, ast.Call) and last_name(passed.func) == "partial" and passed.args:
            passed = passed.args[0]
        return isinstance(passed, ast.Attribute) and passed.attr == self.rule.compaction

    @staticmethod
    def _identity_passed(compaction: ast.Call, target: FunctionInfo, call: ast.Call | None) -> bool:
        """A compaction in a helper whose rows are a parameter the call passes rows 0..n-1
        for (`pack_rows(model, rows=self.arange[:n])` with `model.compact_topk_indices(rows)`)."""
        rows = compaction.args[0] if compaction.args else next((k.value for k in compaction.keywords if k.arg), None)
        if call is None or not isinstance(rows, ast.Name) or rows.id not in target.facts.params:
            return False
        passed = call_argument(call, target, target.facts.params.index(rows.id))
        return passed is not None and identity_rows(ast.Call(func=compaction.func, args=[passed], keywords=[]))

    def _exit_effect(self, fn, expr, self_cls, forward: bool, depth: int) -> str | None:
        """What leaving a `with` block runs: the `__exit__` of the context manager's class."""
        if not isinstance(expr, ast.Call) or fn is None:
            return None
        spelled = ref(expr.func)
        if not spelled:
            return None
        sym = self.summaries.resolve(fn, spelled, self_cls)
        if sym.kind != "class":
            # a `@contextmanager` generator: what follows its `yield`
            manager = self.summaries.function_for(sym)
            if manager is None or not self._is_context_manager(manager):
                return None
            owner = self_cls if (spelled.startswith("self.") and spelled.count(".") == 1) else manager.owner()
            first, last = self.effect(manager, owner, expr, {}, depth - 1, leaving=True)
            return first if forward else last
        cls = self.view.project.class_of(sym)
        if cls is None:
            return None
        method = cls.method("__exit__")
        if method is None:
            return None
        first, last = self.effect(method, cls, None, {}, depth - 1)
        return first if forward else last

    def _decorators(self, target: FunctionInfo) -> list[tuple[ast.AST, str]]:
        """(the wrapper function, the name it calls the wrapped one by) of each decorator of
        `target` defined in the project, innermost first: `def deco(fn): def wrapper(*a):
        out = fn(*a); ...; return wrapper` (also a factory: `@timed("x")`)."""
        node = target.node()
        if node is None or not getattr(node, "decorator_list", None):
            return []
        out = []
        for dec in reversed(node.decorator_list):
            factory = isinstance(dec, ast.Call)
            spelled = ref(dec.func if factory else dec)
            if not spelled or spelled.rsplit(".", 1)[-1] in ("staticmethod", "classmethod", "property", "contextmanager", "cache", "lru_cache"):
                continue
            info = self.summaries.function_for(self.summaries.resolve(target, spelled, target.owner()))
            dnode = info.node() if info is not None else None
            if dnode is None:
                continue
            if factory:
                dnode = returned_def(dnode)
                if dnode is None:
                    continue
            wrapper = returned_def(dnode)
            params = [a.arg for a in dnode.args.posonlyargs + dnode.args.args]
            if wrapper is not None and params:
                out.append((wrapper, params[0]))
        return out

    def _owners(self) -> set[str]:
        """`self.model.model` -> {`self.model.model`, `self.model`}; bare `self` is no model."""
        out = set()
        for name in {self.receiver, self.canon_receiver} - {None}:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if i >= 2 or prefix not in ("self", "cls"):
                    out.add(prefix)
        return out

    def _same_model(self, recv: str | None) -> bool:
        """A compaction on the switched model, an owner of it, or on what cannot be told."""
        mine = self.canon_receiver
        if recv is None or mine is None:
            return True
        return recv == mine or recv.startswith(mine + ".") or mine.startswith(recv + ".")

    # -- the window -----------------------------------------------------------------------------
    def judge(self, idx: int) -> Verdict:
        view, flow = self.view, self.flow
        fn = view.info
        aliases = dotted_aliases(view.node)
        known = {**self._from_callers(), **flow.known_at(idx, fixed=True), **self.assumed}
        self._known = self._flow_known[id(flow)] = known
        if self._switch_compacts(fn):
            return Verdict(ok=True)
        in_forward_loop = any(
            any("fwd" in (self.classify(flow.nodes[m], aliases, fn, self.owner, flow, True, idx), self.classify(flow.nodes[m], aliases, fn, self.owner, flow, False, idx)) for m in loop.members if flow.nodes[m].kind == "call")
            for loop in flow.loops_of(idx)
        )
        verdict = Verdict(ok=False)
        sides = []
        partial: set[int] = set()
        for forward in (False, True):
            stop = self._stopper(aliases, fn, self.owner, flow, forward, idx)
            if forward:
                paths = self._search_on(idx, stop, known)
            else:
                paths = flow.search(idx, forward, stop, known, self._assume)
            uncovered = paths.get("fwd", []) + (paths.get("mixed", []) if forward else [])
            ends = paths.get("end", [])
            hits = paths.get("hit", []) + ([] if forward else paths.get("mixed", []))
            if hits and (uncovered or ends):
                partial.update(p[-1] for p in hits)
            if in_forward_loop and ends and (paths.get("hit") or paths.get("mixed") or uncovered):
                ends = []  # the start/end of the function is not this loop's window
            if forward and uncovered and verdict.next_forward is None:
                last = uncovered[0][-1]
                verdict.next_forward = view.text(flow.nodes[last].node.func)
            sides.append((uncovered, ends))
        # step 0 ran in this function: every path into the switch comes from a forward
        proposal = bool(sides[0][0]) and not sides[0][1]
        for forward, (uncovered, ends) in zip((False, True), sides):
            if uncovered:
                continue
            if not ends:
                verdict.ok = True
                return verdict
            # the window goes on in the callers
            returned = returned_after(view.node, self.switch) if forward else None
            outcome = self._through_callers(fn, forward, known, CALLER_DEPTH, verdict, returned)
            if outcome == "covered":
                verdict.ok = True
                return verdict
            if forward and outcome == "unknown" and proposal:
                # no draft step follows in this proposal (a test that flips the switch and
                # asserts; a path that returns before the loop)
                verdict.ok = verdict.unseen_callers = True
                return verdict
            if outcome == "unknown" and self._reachable_sibling_compacts():
                verdict.ok = True
                verdict.left_to_guard = True
                return verdict
        verdict.partial = [f"line {flow.nodes[i].node.lineno}" for i in sorted(partial)]
        return verdict

    def _search_on(self, idx: int, stop, known: dict[str, bool]) -> dict[str, list[list[int]]]:
        """The paths after the switch. A switch under `step == K` in `for step in range(...)`
        is followed through the rest of step K, then through step K + 1 with the counter
        known (`if step == 1: compact(...)` at the top of the loop runs before that step's
        forward), then on with the counter unknown."""
        flow = self.flow
        counted = loop_counter_at(flow, idx)
        if counted is None:
            ahead = [c for c in (counted_loop(loop) for loop in flow.loops) if c is not None and idx not in c[0].members]
            if ahead:
                return self._search_into_loops(idx, stop, known, ahead)
            return flow.search(idx, True, stop, known, self._assume)
        loop, counter, value = counted
        out: dict[str, list[list[int]]] = {}
        starts = [idx]
        for phase in (value, value + 1, None):
            def assume(atom, v=phase):
                got = counter_test(atom[0], counter, v, known) if v is not None else None
                return got if got is not None else self._assume(atom)

            def bounded(node, last=phase is None):
                return "wrap" if node.index == loop.head and not last else stop(node)

            wrapped = False
            for start in starts:
                found = flow.search(start, True, bounded, known, assume)
                wrapped = wrapped or bool(found.pop("wrap", None))
                for verdict, paths in found.items():
                    out.setdefault(verdict, []).extend(paths)
            if not wrapped:
                break
            starts = [loop.head]
        return out

    def _search_into_loops(self, idx: int, stop, known: dict[str, bool], ahead) -> dict[str, list[list[int]]]:
        """The paths after a switch that a counted loop follows (`for step in range(1, n):`):
        up to the loop, then through its first iteration with the counter at its first value
        (`if step == 1: compact(...)` at the top runs before that step's forward), then on
        with the counter unknown."""
        flow = self.flow
        heads = {loop.head: (loop, counter, first) for loop, counter, first in ahead}
        out: dict[str, list[list[int]]] = {}

        def merge(found):
            for verdict, paths in found.items():
                out.setdefault(verdict, []).extend(paths)

        found = flow.search(idx, True, lambda n: "enter" if n.index in heads else stop(n), known, self._assume)
        entered = {p[-1] for p in found.pop("enter", [])}
        merge(found)
        for head in sorted(entered):
            loop, counter, first = heads[head]

            def assume(atom, v=first, c=counter):
                got = counter_test(atom[0], c, v, known)
                return got if got is not None else self._assume(atom)

            once = flow.search(head, True, lambda n, h=head: "wrap" if n.index == h else stop(n), known, assume)
            wrapped = once.pop("wrap", None)
            merge(once)
            if wrapped:
                merge(flow.search(head, True, stop, known, self._assume))
        return out

    def _from_callers(self) -> dict[str, bool]:
        """What every call of the switch's function the source shows tells of its
        parameters (`enter_reuse(model, keep_rows=rows)`: `keep_rows is not None`), for those
        the function never binds anew; nothing when no call is shown or they disagree."""
        view, fn = self.view, self.view.info
        node = view.node
        if fn is None or not getattr(node, "args", None) or not fn.facts.params:
            return {}
        rebound = self.flow.assigned
        method = fn.facts.cls is not None
        agreed: dict[str, bool] | None = None
        for _caller, _node, call in caller_sites(fn, view.owner(), view):
            told = bind_params(node, call, {}, skip_self=method)
            agreed = told if agreed is None else {a: v for a, v in agreed.items() if told.get(a) == v}
            if not agreed:
                return {}
        if not agreed:
            return {}
        return {a: v for a, v in agreed.items() if a.split(" ", 1)[0] not in rebound}

    def _stopper(self, aliases, fn, self_cls, flow: Flow, forward: bool, start: int):
        def stop(node):
            return self.classify(node, aliases, fn, self_cls, flow, forward, start)
        return stop

    def _assume(self, atom) -> bool | None:
        """`hasattr(x, "compact_topk_indices")` is true: a model without it is IC003's finding.
        Not of an object that holds the switched model (`hasattr(self.model, ...)` beside
        `self.model.model.set_skip_topk(True)`): the wrapper need not have the method."""
        source = atom[0]
        if source.startswith("hasattr(") and (f"'{self.rule.compaction}'" in source or f'"{self.rule.compaction}"' in source):
            mine = self.canon_receiver or self.receiver
            if mine is not None:
                try:
                    tested = ast.parse(source, mode="eval").body
                except SyntaxError:
                    tested = None
                spelled = ref(tested.args[0]) if isinstance(tested, ast.Call) and tested.args else None
                if spelled is not None and mine.startswith(spelled + "."):
                    return None
            return True
        return None

    def _through_callers(self, fn: FunctionInfo | None, forward: bool, known: dict[str, bool], depth: int, verdict: Verdict,
                         returned: bool | None = None) -> str:
        """'covered' if every caller covers the rest of the window on this side, 'open' if
        one does not, 'unknown' if no caller is known (or, after the switch, a caller's path
        ends where no caller is known). `returned`: what `fn` returns on every path after the
        switch (or the call the window came through), when that can be told: a caller's
        branch on the call's value is then decided (`if self.begin_reuse(rows): compact(rows)`)."""
        if fn is None or depth <= 0:
            return "unknown"
        owner = self.owner if self.owner is not None else fn.owner()
        sites = list(caller_sites(fn, owner, self.view, subclasses=True))
        entered = not sites and owner is not None and fn.short in ("__enter__", "__aenter__")
        if entered:
            # a context manager class's `__enter__`: its callers are the `with` statements
            sites = list(self._with_sites(owner))
        if not sites:
            return "unknown"
        stable_self = {a: p for a, p in known.items() if a.startswith("self.")}
        outcome = "covered"
        for caller, node, call in sites:
            # the switched model as the caller spells it: `enable_reuse(self.model.model)`
            # with `def enable_reuse(draft_model): draft_model.set_skip_topk(True)`
            mine = self.receiver, self.canon_receiver
            # (the model a context manager holds is not spelled at its `with`: cannot be told)
            self.receiver = self.canon_receiver = None if entered else self._receiver_at(fn, call)
            # in a subclass's caller, `self` is the subclass's instance
            here = caller.owner()
            if not entered and (here is None or owner is None or owner.name not in {c.name for c in here.classes()[1:]}):
                here = owner
            try:
                got = self._through_caller(caller, node, call, here, forward, stable_self, depth, verdict, returned)
            finally:
                self.receiver, self.canon_receiver = mine
            if got == "open":
                return "open"
            if got == "unknown":
                outcome = "unknown"
        return outcome

    def _with_sites(self, owner: ClassInfo) -> Iterator[tuple[FunctionInfo, ast.AST, ast.Call]]:
        """(caller, its node, the call) for each `with Owner(...)` (or `async with`) of the
        project, the call resolved to the class: its `__enter__` runs there."""
        short = owner.qual.rsplit(".", 1)[-1]
        summaries = self.summaries
        for module, facts, spots in self.view.project.call_sites(short):
            caller = FunctionInfo(module, facts)
            here = caller.owner()
            if not any(summaries.resolve(caller, c.ref, here).name == owner.name for c in spots if c.ref):
                continue
            node = caller.node()
            if node is None:
                continue
            for sub in walk_local(node):
                if not isinstance(sub, (ast.With, ast.AsyncWith)):
                    continue
                for item in sub.items:
                    call = item.context_expr
                    if isinstance(call, ast.Call) and last_name(call.func) == short and summaries.resolve(caller, ref(call.func), here).name == owner.name:
                        yield caller, node, call

    def _receiver_at(self, fn: FunctionInfo, call: ast.Call) -> str | None:
        """The switched model in a caller's terms: a receiver rooted at a parameter of `fn`
        becomes the argument passed for it (None, "cannot be told", when none is spelled);
        `self.*` stays as it is."""
        mine = self.canon_receiver
        if mine is None:
            return mine
        root, dot, rest = mine.partition(".")
        params = fn.facts.params
        if root not in params or (fn.facts.cls is not None and root == params[0]):
            return mine  # `self.model`: the same object in a method of the class
        passed = call_argument(call, fn, params.index(root))
        spelled = ref(passed) if passed is not None else None
        return spelled + dot + rest if spelled is not None else None

    def _through_caller(self, caller, node, call, owner: ClassInfo | None, forward: bool, stable_self: dict[str, bool], depth: int, verdict: Verdict,
                        returned: bool | None = None) -> str:
        """One caller's share of `_through_callers`: 'covered', 'open' or 'unknown'."""
        flow = FieldFlow(node)
        idx = flow.by_call.get(id(call))
        if idx is None:
            return "open"
        aliases = dotted_aliases(node)
        stop = self._stopper(aliases, caller, owner, flow, forward, idx)
        known_here = dict(flow.known_at(idx, fixed=True))
        known_here.update(stable_self)
        if returned is not None:
            # the branch the caller takes on this call's value (`if self.hook(rows):`, or
            # through a local bound once to it: `reused = self.hook(rows)`, then `if reused:`)
            known_here[atom_source(call)] = returned
            for name in _bound_once_to(node, call, flow):
                known_here[name] = returned
        self._flow_known[id(flow)] = known_here
        paths = flow.search(idx, forward, stop, known_here, self._assume)
        uncovered = paths.get("fwd", []) + (paths.get("mixed", []) if forward else [])
        if uncovered:
            return "open"
        verdict.via.append(caller.qual)
        if paths.get("end"):
            if not forward:
                return "open"  # further up: the order is not in the source
            if depth <= 1:
                return "open"
            return self._through_callers(caller, forward, known_here, depth - 1, verdict, returned_after(node, call))
        return "covered"

    def _reachable_sibling_compacts(self) -> bool:
        owner, fn = self.owner, self.view.info
        if owner is None or fn is None:
            return False
        own_calls = {c.name for c in fn.facts.calls}
        for cls in owner.classes():
            for name in cls.own_members():
                if name == fn.short or name in own_calls:
                    continue
                method = cls.method(name)
                if method is None:
                    continue
                if not self.rule.compacts(self.summaries, method, owner):
                    continue
                if self._reachable(owner, cls, name):
                    return True
        return False

    def _reachable(self, owner: ClassInfo, defining: ClassInfo, name: str) -> bool:
        if self.rule.entry_points.matches(name):
            return True
        mro = owner.classes()
        later = mro[mro.index(defining) + 1 :] if defining in mro else []
        if any(name in c.own_members() for c in later) or owner.has_unresolved_base():
            return True  # overrides a base method (or may: a base the project cannot see)
        # called anywhere in the project (other than by itself)
        word = Words(name)
        for path in self.view.project.files_containing(name):
            module = self.view.project.module_at(path)
            for chunk in module.leaf_chunks(word):
                for facts in module.chunk_facts(chunk).functions.values():
                    if facts.qual.rsplit(".", 1)[-1] != name and any(c.name == name for c in facts.calls):
                        return True
        return False

    # -- words ----------------------------------------------------------------------------------
    def message(self, verdict: Verdict, bound: str | None = None) -> str:
        rule = self.rule
        prefix = f"{self.receiver}." if self.receiver else ""
        where = f"the next forward `{verdict.next_forward}(...)`" if verdict.next_forward else "the next draft step"
        text = (
            f"`{prefix}{rule.switch}(True)`{' bound to ' + bound if bound else ''} makes later draft steps reuse the shared top-k buffer, "
            f"but no `{rule.compaction}` call (direct or via a helper) runs between the forward "
            f"before it and {where}"
        )
        if verdict.partial:
            text += f" on every path (the compaction at {', '.join(verdict.partial)} is not on every path)"
        return text + ": those steps would read per-token rows instead of one row per request"


# -- the switches of a function ------------------------------------------------------------------


def _as_stored(spelled: str | None, fn: FunctionInfo) -> str | None:
    """A ref rooted at a parameter the method also stores on `self` (`self.model = model`),
    spelled from `self` (`model.model` -> `self.model.model`): what the other methods of the
    class call it."""
    if not spelled:
        return spelled
    head, dot, rest = spelled.partition(".")
    if head not in fn.facts.params[1:]:
        return spelled
    stored = next((a for a, how in fn.facts.self_attrs.items() if how == ["ref", head]), None)
    return f"self.{stored}{dot}{rest}" if stored else spelled


def _bindings_of(func: ast.AST, name: str) -> list[ast.AST | None]:
    """Every value a plain assignment binds `name` to in `func`; None for any other binding
    (a loop target, an augmented assignment, a `with` target)."""
    out: list[ast.AST | None] = []
    for sub in walk_local(func):
        if isinstance(sub, ast.Assign):
            for t in sub.targets:
                if isinstance(t, ast.Name) and t.id == name:
                    out.append(sub.value)
                elif name in target_names(t):
                    out.append(None)
        elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)) and isinstance(sub.target, ast.Name) and sub.target.id == name:
            out.append(sub.value if isinstance(sub, ast.AnnAssign) else None)
        elif isinstance(sub, ast.NamedExpr) and sub.target.id == name:
            out.append(sub.value)
        elif isinstance(sub, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            targets = [sub.target] if isinstance(sub, (ast.For, ast.AsyncFor)) else [i.optional_vars for i in sub.items if i.optional_vars is not None]
            if any(name in target_names(t) for t in targets):
                out.append(None)
    return out


def _got_attribute(value: ast.AST) -> ast.AST:
    """`model.f` for `getattr(model, "f")` or `getattr(model, "f", default)`; else `value`."""
    if (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr"
        and len(value.args) in (2, 3) and not value.keywords
        and isinstance(value.args[1], ast.Constant) and isinstance(value.args[1].value, str)
        and value.args[1].value.isidentifier()
    ):
        return ast.copy_location(ast.Attribute(value=value.args[0], attr=value.args[1].value, ctx=ast.Load()), value)
    return value


def _bound_once_to(func: ast.AST, call: ast.Call, flow: Flow) -> list[str]:
    """The local a statement binds to the value of `call` (`reused = self.hook(rows)`), when
    it is bound nowhere else (`Flow.fixed`)."""
    for sub in walk_local(func):
        if isinstance(sub, ast.Assign) and sub.value is call and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
            name = sub.targets[0].id
        elif isinstance(sub, ast.AnnAssign) and sub.value is call and isinstance(sub.target, ast.Name):
            name = sub.target.id
        else:
            continue
        return [name] if name in flow.fixed else []
    return []


def assumed_on(view: FunctionView, made: ast.Call) -> dict[str, bool] | None:
    """When a switch call (`made`, in the function of `view`) turns reuse on: `{}` for the
    literal `True`; for a value the source reads (`set_skip_topk(self.share)`), the atom that
    holds when it is on; for a parameter of the function (`set_skip_topk(enabled)`), `{}` when
    a call the source shows passes `True` or leaves a `True` default; None otherwise (off, or
    left to the runtime guard)."""
    value = switch_value(made)
    if value is not None:
        return {} if value else None
    arg = made.args[0] if made.args else (made.keywords[0].value if len(made.keywords) == 1 else None)
    if arg is None or isinstance(arg, ast.Starred):
        return None
    node = view.node
    params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs] if hasattr(node, "args") else []
    if isinstance(arg, ast.Name) and arg.id in params:
        if view.info is None:
            return None
        method = view.info.facts.cls is not None
        for _caller, _node, call in caller_sites(view.info, view.owner(), view):
            if bind_params(node, call, {}, skip_self=method).get(arg.id) is True:
                return {}
        return None
    spelled = ref(arg)
    return {spelled: True} if spelled else None


@dataclass
class BoundSwitch:
    """A switch bound to an instance attribute and called in a method of the class: `target`
    (the attribute, `self._reuse_on`), `value` (what is bound to it: the `functools.partial`
    call or the method), `method` and `call` (the method that calls it and the call, where it
    is judged), and the `window` and `verdict` of that call."""

    target: ast.Attribute
    value: ast.AST
    method: FunctionInfo
    call: ast.Call
    window: Window
    verdict: Verdict


def bound_switches(view: FunctionView, query: SwitchQuery, holds_buffer: Callable[[str], bool]) -> Iterator[BoundSwitch]:
    """The switches the function of `view` binds to an instance attribute
    (`self._reuse_on = functools.partial(self.model.model.set_skip_topk, True)`,
    `= <model>.set_skip_topk` or `= getattr(<model>, "set_skip_topk", None)`) whose call in a method of the class (`self._reuse_on()`) turns
    reuse on with no compaction around it: each such call is the switch, judged where it is
    called; the first one of each binding whose receiver may hold a shared top-k buffer
    (`holds_buffer(receiver)`: False for a sampler)."""
    owner = view.owner()
    if owner is None or view.info is None or not view.info.facts.params:
        return
    me = view.info.facts.params[0]
    aliases = None
    for st in walk_local(view.node):
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Attribute)):
            continue
        target, value = st.targets[0], st.value
        if not (isinstance(target.value, ast.Name) and target.value.id == me):
            continue
        if isinstance(value, ast.Call) and last_name(value.func) == "partial" and value.args:
            switch, bound = value.args[0], value
        else:
            switch, bound = value, None
        switch = _got_attribute(switch)  # `getattr(inner, "set_skip_topk", None)`
        if last_name(switch) != query.switch or not isinstance(switch, ast.Attribute) or ref(switch.value) is None:
            continue
        aliases = dotted_aliases(view.node) if aliases is None else aliases
        receiver = _as_stored(canonical_name(ref(switch.value), aliases), view.info)
        for method, node, call in attribute_calls(owner, target.attr):
            made = ast.Call(
                func=switch,
                args=(list(bound.args[1:]) if bound else []) + list(call.args),
                keywords=(list(bound.keywords) if bound else []) + list(call.keywords),
            )
            if switch_value(ast.copy_location(made, call)) is not True:
                continue
            there = FunctionView(view.ctx, method.module, node, method.qual)
            flow = FieldFlow(node)
            idx = flow.by_call.get(id(call))
            if idx is None:
                continue
            window = Window(query, there, flow, call, made, receiver=receiver)
            verdict = window.judge(idx)
            if verdict.ok or not holds_buffer(receiver):
                continue
            yield BoundSwitch(target, value, method, call, window, verdict)
            break


# -- helpers ------------------------------------------------------------------------------------


def loop_counter_at(flow: Flow, idx: int):
    """(loop, counter, K) when node `idx` runs only in step K of the innermost loop around
    it, a `for <counter> in range(...)` counting by one (`if step == 0:`, `if not step:`)."""
    loops = flow.loops_of(idx)
    if not loops:
        return None
    loop = loops[-1]
    node = loop.node
    if isinstance(node, ast.While):
        counter = _while_counter(node)
        if counter is None:
            return None
    else:
        ranged = _range_by_one(node)
        if ranged is None:
            return None
        counter = ranged[0]
    for source, polarity in flow.nodes[idx].conds:
        if source == counter and polarity is False:
            return loop, counter, 0
        if polarity:
            try:
                test = ast.parse(source, mode="eval").body
            except SyntaxError:
                continue
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
                left, right = test.left, test.comparators[0]
                if isinstance(right, ast.Name):
                    left, right = right, left
                if isinstance(left, ast.Name) and left.id == counter and isinstance(right, ast.Constant) \
                        and type(right.value) is int:
                    return loop, counter, right.value
    return None


def _while_counter(node: ast.While) -> str | None:
    """The counter of a `while` loop whose body ends with `<counter> += 1` and binds it
    nowhere else (each iteration is then one value of it, as in `for ... in range(...)`)."""
    last = node.body[-1] if node.body else None
    if not (isinstance(last, ast.AugAssign) and isinstance(last.target, ast.Name) and isinstance(last.op, ast.Add)
            and isinstance(last.value, ast.Constant) and last.value.value == 1):
        return None
    counter = last.target.id
    rest = ast.While(test=node.test, body=node.body[:-1], orelse=[])
    return None if counter in _assigned_in(rest) or node.orelse else counter


def _range_by_one(node: ast.AST) -> tuple[str, list[ast.expr]] | None:
    """(counter, the `range` arguments) of a `for <counter> in range(...)` counting up by
    one, its counter not bound anew in its body (each iteration is one step number)."""
    if not (isinstance(node, (ast.For, ast.AsyncFor)) and isinstance(node.target, ast.Name)):
        return None
    it = node.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords and it.args):
        return None
    if len(it.args) == 3 and not (isinstance(it.args[2], ast.Constant) and it.args[2].value == 1):
        return None
    if node.target.id in _assigned_in(node):
        return None  # rebound in the body: not the step number
    return node.target.id, it.args


def counted_loop(loop) -> tuple | None:
    """(loop, counter, its first value) of a `for <counter> in range(...)` counting up by
    one from a constant, its counter not bound anew in its body; None for any other loop."""
    ranged = _range_by_one(loop.node)
    if ranged is None:
        return None
    counter, args = ranged
    if len(args) == 1:
        return loop, counter, 0
    if isinstance(args[0], ast.Constant) and type(args[0].value) is int:
        return loop, counter, args[0].value
    return None


def _assigned_in(loop: ast.AST) -> set[str]:
    out = set()
    for stmt in loop.body:
        for sub in walk_local(stmt):
            if isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
                targets = sub.targets if isinstance(sub, ast.Assign) else [getattr(sub, "target", None)]
                out.update(t.id for t in targets if isinstance(t, ast.Name))
    return out


_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def counter_atom(source: str, counter: str, value: int) -> bool | None:
    """The truth of a condition atom when the loop counter holds `value` (`step == 1`,
    `step > 0`, `0 < step`, `step`), None when the atom is not about the counter alone."""
    if source == counter:
        return value != 0
    if counter not in source:
        return None
    try:
        test = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _COMPARE):
        return None
    left, right, op = test.left, test.comparators[0], _COMPARE[type(test.ops[0])]
    if isinstance(left, ast.Name) and left.id == counter and isinstance(right, ast.Constant) and type(right.value) is int:
        return op(value, right.value)
    if isinstance(right, ast.Name) and right.id == counter and isinstance(left, ast.Constant) and type(left.value) is int:
        return op(left.value, value)
    return None


def counter_test(source: str, counter: str, value: int, known: dict[str, bool]) -> bool | None:
    """The truth of a branch test when the loop counter holds `value` and the atoms of
    `known` hold (`step == 1 and self.share`), None when that does not decide it."""
    if counter not in source:
        return None
    try:
        test = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None

    def truth(node: ast.AST) -> bool | None:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = truth(node.operand)
            return None if inner is None else not inner
        if isinstance(node, ast.BoolOp):
            parts = [truth(v) for v in node.values]
            if isinstance(node.op, ast.And):
                return False if False in parts else (True if all(p is True for p in parts) else None)
            return True if True in parts else (False if all(p is False for p in parts) else None)
        text = atom_source(node)
        got = counter_atom(text, counter, value)
        return got if got is not None else known.get(text)

    return truth(test)


def calls_in(node: ast.AST) -> Iterator[ast.Call]:
    for sub in walk_local(node):
        if isinstance(sub, ast.Call):
            yield sub


def switch_value(call: ast.Call) -> bool | None:
    """True/False for `f(True)`/`f(False)`, or the same as the only keyword argument; None
    when the value is not a literal."""
    if call.args:
        arg = call.args[0]
    elif len(call.keywords) == 1:
        arg = call.keywords[0].value
    else:
        return None
    kind = literal_kind(arg)
    return True if kind == "True" else False if kind == "False" else None


def called_through(call: ast.Call, bound: dict[str, ast.Call], aliases: dict[str, str]) -> ast.Call:
    """The call a call of a local makes: of the function a `functools.partial` bound to it
    wraps, with its arguments first (`enter()` with `enter = partial(m.set_skip_topk, True)`),
    or of the method a local names (`switch = m.set_skip_topk`, then `switch(True)`)."""
    made = through_partial(call, bound)
    if made is not call:
        return made
    named = through_getattr(call)
    if named is not None:
        return named
    if isinstance(call.func, ast.Name):
        target = aliases.get(call.func.id)
        if target and "." in target:
            return call_of(target, call)
    return call


def through_getattr(call: ast.Call) -> ast.Call | None:
    """`getattr(m, "set_skip_topk")(True)` as the call `m.set_skip_topk(True)` it makes;
    None for any other call."""
    func = call.func
    if not (isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr" and 2 <= len(func.args) <= 3):
        return None
    name = func.args[1]
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.isidentifier()):
        return None
    attr = ast.copy_location(ast.Attribute(value=func.args[0], attr=name.value, ctx=ast.Load()), func)
    return ast.copy_location(ast.Call(func=attr, args=call.args, keywords=call.keywords), call)


def call_of(spelled: str, call: ast.Call) -> ast.Call:
    """`call` with its callee replaced by the dotted `spelled`."""
    try:
        func = ast.parse(spelled, mode="eval").body
    except SyntaxError:
        return call
    return ast.copy_location(ast.Call(func=func, args=call.args, keywords=call.keywords), call)


def attribute_calls(owner: ClassInfo, attr: str):
    """(method, its ast node, the call) for each call `self.<attr>(...)` in the methods of a
    class and its bases; where they make none, in those of the project's subclasses (a base
    class's `load_model` binds it, a subclass's `propose` calls it)."""
    word = Words(attr)
    found = False
    for method, node, call in _attribute_calls_in(owner.classes(), attr, word):
        found = True
        yield method, node, call
    if not found:
        for _cls, method in _subclass_methods(owner, attr, word):
            node = method.node()
            me = method.facts.params[0] if method.facts.params else None
            if node is None or me is None:
                continue
            for call in calls_in(node):
                if ref(call.func) == f"{me}.{attr}":
                    yield method, node, call


def _attribute_calls_in(classes, attr: str, word: Words):
    for cls in classes:
        text = cls.module.source.text
        chunks = {c.name: c for c in cls.module.class_chunks(cls.qual)[1:]}
        for member in cls.own_members():
            chunk = chunks.get(member)
            if chunk is None or not word.holds(text, chunk.start, chunk.end):
                continue
            method = cls.method(member)
            if method is None or not method.facts.params:
                continue
            me = method.facts.params[0]
            if not any(c.ref == f"{me}.{attr}" for c in method.facts.calls):
                continue
            node = method.node()
            if node is None:
                continue
            for call in calls_in(node):
                if ref(call.func) == f"{me}.{attr}":
                    yield method, node, call


def dotted_aliases(node: ast.AST) -> dict[str, str]:
    """Local names bound once to a dotted value: `draft_model = self.model.model`."""
    seen: dict[str, set[str | None]] = {}
    for sub in walk_local(node):
        if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
            seen.setdefault(sub.targets[0].id, set()).add(_dotted(sub.value))
        elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)) and isinstance(sub.target, ast.Name):
            seen.setdefault(sub.target.id, set()).add(_dotted(sub.value) if isinstance(sub, ast.AnnAssign) and sub.value else None)
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1 and None not in v}


def _dotted(value: ast.AST) -> str | None:
    """The dotted ref a value names: `a.b.c`, also `getattr(a.b, "c")` and `getattr(a.b, "c",
    None)` (the bound method, where it exists)."""
    if (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr"
        and len(value.args) in (2, 3) and not value.keywords
        and isinstance(value.args[1], ast.Constant) and isinstance(value.args[1].value, str) and value.args[1].value.isidentifier()
    ):
        holder = ref(value.args[0])
        return f"{holder}.{value.args[1].value}" if holder else None
    return ref(value)


def canonical_name(name: str, aliases: dict[str, str]) -> str:
    for _ in range(8):
        head, dot, rest = name.partition(".")
        target = aliases.get(head)
        if target is None or target == head:
            break
        name = target + dot + rest
    return name


def caller_sites(fn: FunctionInfo, owner: ClassInfo | None, view=None, subclasses: bool = False):
    """(caller, its ast node, the call) for each call of `fn` whose caller the source shows:
    `self.<fn>(...)` in the methods of its class and their bases (with `subclasses`, when
    there are none, in the project's subclasses that inherit it: a project-wide search), and
    a nested function called by name in the function that defines it."""
    name = fn.short
    head, sep, _ = fn.qual.rpartition(".<locals>.")
    if sep:
        enclosing = fn.module.function(head)
        node = enclosing.node() if enclosing is not None else None
        if node is not None:
            for call in calls_in(node):
                if isinstance(call.func, ast.Name) and call.func.id == name:
                    yield enclosing, node, call
        return
    if owner is None:
        if view is not None and fn.facts.cls is None:
            # a module-level function: its call sites in the project, resolved through imports
            from .fields import callers

            for site in callers(view, fn):
                yield site.caller, site.node, site.call
        return
    word = Words(name)
    found = False
    for cls in owner.classes():
        text = cls.module.source.text
        chunks = {c.name: c for c in cls.module.class_chunks(cls.qual)[1:]}
        for member in cls.own_members():
            chunk = chunks.get(member)
            if chunk is not None and not word.holds(text, chunk.start, chunk.end):
                continue
            method = cls.method(member)
            if method is None or method == fn:
                continue
            if not any(c.name == name and c.ref in (f"self.{name}", f"super().{name}") for c in method.facts.calls):
                continue
            node = method.node()
            if node is None:
                continue
            for call in calls_in(node):
                if last_name(call.func) == name and ref(call.func) in (f"self.{name}", f"super().{name}"):
                    found = True
                    yield method, node, call
    if subclasses and not found:
        yield from _subclass_sites(fn, owner, word)


def _is_torch_module(sym) -> bool:
    return sym.name in ("torch.nn.Module", "torch.nn.modules.module.Module")


def calls_beyond_class(fn: FunctionInfo, owner: ClassInfo) -> bool:
    """Whether `fn` calls a `self.<name>(...)` that no class of `owner`'s MRO defines: a
    mixin's call of what its users' other bases provide."""
    params = fn.facts.params
    if not params:
        return False
    me = params[0] + "."
    return any(c.ref == me + c.name and not owner.lookup(c.name)[2] for c in fn.facts.calls if c.ref)


MIXED_INTO_LIMIT = 8  # subclasses a switch's window is judged for, at most


def mixed_into(owner: ClassInfo, fn: FunctionInfo) -> list[ClassInfo]:
    """The project's subclasses of `owner` that inherit `fn` (do not override it): in their
    instances `self.<name>` resolves through their whole MRO, so a mixin's method calls its
    sibling bases' methods, and their methods call it. A project-wide search for the class's
    name; at most `MIXED_INTO_LIMIT`."""
    project = owner.project
    short = owner.qual.rsplit(".", 1)[-1]
    word = Words(short)
    out: list[ClassInfo] = []
    seen: set[tuple[str, str]] = set()
    for path in project.files_containing(short):
        module = project.module_at(path)
        for chunk in module.leaf_chunks(word):
            for qual in module.chunk_facts(chunk).classes:
                if qual.startswith("<") or (str(module.path), qual) in seen:
                    continue
                seen.add((str(module.path), qual))
                cls = module.klass(qual)
                if cls is None or owner.name not in {c.name for c in cls.classes()[1:]}:
                    continue
                if cls.method(fn.short) == fn:
                    out.append(cls)
                    if len(out) >= MIXED_INTO_LIMIT:
                        return out
    return out


def _subclass_methods(owner: ClassInfo, name: str, word: Words) -> Iterator[tuple[ClassInfo, FunctionInfo]]:
    """(class, method) for each method of a project subclass of `owner` (not `owner` nor its
    bases) that calls `self.<name>(...)` or `super().<name>(...)`: a project-wide search."""
    project = owner.project
    mine = {(str(c.module.path), c.qual) for c in owner.classes()}
    for path in project.files_containing(name):
        module = project.module_at(path)
        for chunk in module.leaf_chunks(word):
            for facts in module.chunk_facts(chunk).functions.values():
                if facts.cls is None or not facts.params:
                    continue
                refs = (f"{facts.params[0]}.{name}", f"super().{name}")
                if not any(c.name == name and c.ref in refs for c in facts.calls):
                    continue
                cls = module.klass(facts.cls)
                if cls is None or (str(module.path), cls.qual) in mine or owner.name not in {c.name for c in cls.classes()[1:]}:
                    continue
                method = module.function(facts.qual)
                if method is not None:
                    yield cls, method


def _subclass_sites(fn: FunctionInfo, owner: ClassInfo, word: Words):
    """`self.<fn>(...)` in the methods of the project's subclasses of `owner` that inherit
    `fn` (a base class's helper called only from a subclass's `propose`)."""
    name = fn.short
    refs = (f"self.{name}", f"super().{name}")
    for cls, method in _subclass_methods(owner, name, word):
        if cls.method(name) != fn:
            continue  # a subclass that overrides the helper
        node = method.node()
        if node is None:
            continue
        for call in calls_in(node):
            if last_name(call.func) == name and ref(call.func) in refs:
                yield method, node, call


_INDEX_NAMES = ("token_indices_to_sample", "last_token_indices")
_PLACEHOLDER = "token_indices_to_sample"


def sampled_rows_name(node: ast.AST) -> str:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and "token_indices" in sub.id:
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute) and "token_indices" in sub.attr:
            r = ref(sub)
            if r:
                names.add(r)
    for preferred in _INDEX_NAMES:
        for name in sorted(names, key=len):
            if name == preferred or name.endswith("." + preferred):
                return name
    for name in sorted(names):
        return name
    return _PLACEHOLDER



def identity_rows(call: ast.Call, func: ast.AST | None = None) -> bool:
    """A compaction with the rows 0..n-1 (`torch.arange(n)`, `self.arange[:n]`,
    `range(n)`, also one assignment away in `func`: `rows = torch.arange(n)`): each row is
    gathered onto itself, which moves nothing."""
    # the rows are the first argument, by position or by keyword (`slot_ids=...`)
    rows = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg), None)
    if rows is None:
        return False
    if isinstance(rows, ast.Name) and func is not None:
        value = _single_bindings(func).get(rows.id)
        if value is not None and not isinstance(value, ast.Name):
            rows = value
    if isinstance(rows, ast.Call) and last_name(rows.func) in ("arange", "range"):
        return len(rows.args) == 1 or (len(rows.args) >= 2 and isinstance(rows.args[0], ast.Constant) and rows.args[0].value == 0)
    if isinstance(rows, ast.Subscript) and last_name(rows.value) == "arange" and isinstance(rows.slice, ast.Slice):
        return rows.slice.lower is None and rows.slice.step is None
    return False


def bind_params(node: ast.AST, call: ast.Call, known: dict[str, bool], skip_self: bool) -> dict[str, bool]:
    """What a call tells of the parameters of the function it calls, as atoms of its
    conditions: a parameter left to a `None` default or passed `None` is None (`p is None`,
    `not p`), a literal `True`/`False` is that, any other value (a name, an attribute) is not
    None. `x if c else None` takes the branch `known` decides, and is `None` when `known`
    does not decide it (passed under a narrower condition than the caller's)."""
    args = node.args
    params = [a.arg for a in args.posonlyargs + args.args]
    if skip_self and params:
        params = params[1:]
    positional_defaults = dict(zip(reversed([a.arg for a in args.posonlyargs + args.args]), reversed(args.defaults)))
    defaults = {**positional_defaults, **{a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}}
    given: dict[str, ast.AST] = {}
    rest_unknown = False
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            rest_unknown = True
            break
        if i < len(params):
            given[params[i]] = arg
    for kw in call.keywords:
        if kw.arg is None:
            rest_unknown = True
        else:
            given[kw.arg] = kw.value
    out: dict[str, bool] = {}
    for p in params + [a.arg for a in args.kwonlyargs]:
        value = given.get(p)
        if value is None:
            if rest_unknown:
                continue
            value = defaults.get(p)
        while isinstance(value, ast.IfExp):
            test = known.get(_source(value.test))
            if test is None:
                # undecided here: a `None` branch means the value is passed under a narrower
                # condition than the caller's, so it is taken as that `None`
                nones = [v for v in (value.body, value.orelse) if literal_kind(v) == "None"]
                value = nones[0] if nones else None
                break
            value = value.body if test else value.orelse
        if value is None:
            continue
        kind = literal_kind(value)
        if kind == "None":
            out.update({f"{p} is None": True, f"{p} is not None": False, p: False})
        elif kind in ("True", "False"):
            out.update({p: kind == "True", f"{p} is None": False, f"{p} is not None": True})
        elif isinstance(value, (ast.Name, ast.Attribute, ast.Subscript)):
            out.update({f"{p} is None": False, f"{p} is not None": True})
    return out


def _source(expr: ast.AST) -> str:
    try:
        return ast.unparse(expr)
    except Exception:
        return ""


def either_of(func: ast.AST, name: str) -> list[str]:
    """The callables a local bound once to a choice of two holds (`f = a.m if c else b.n`)."""
    # asked for every unresolved call a path search meets (`len(...)`, `print(...)`): the
    # function's choices are read once, kept on its node
    choices = func.__dict__.get("_choices_of_two")
    if choices is None:
        choices = func.__dict__["_choices_of_two"] = _choices_of_two(func)
    return choices.get(name, [])


def _choices_of_two(func: ast.AST) -> dict[str, list[str]]:
    bindings: dict[str, list[ast.AST]] = {}
    for sub in walk_local(func):
        if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            for t in sub.targets if isinstance(sub, ast.Assign) else [sub.target]:
                if isinstance(t, ast.Name):
                    bindings.setdefault(t.id, []).append(sub)
    out: dict[str, list[str]] = {}
    for name, bound in bindings.items():
        if len(bound) != 1 or not isinstance(bound[0], ast.Assign) or not isinstance(bound[0].value, ast.IfExp):
            continue
        choice = bound[0].value
        refs = [ref(v) for v in (choice.body, choice.orelse)]
        if all(refs):
            out[name] = refs
    return out
