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

Any rule may ask these queries; IC002 is the one that reports on them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Iterator

from .facts import call_fact, last_name, literal_kind, ref, walk_local
from .fields import FieldFlow
from .flow import Flow
from .needs import Names, Words
from .objects import partials, through_partial
from .project import ClassInfo, FunctionInfo
from .topk import topk_gathers
from .views import FunctionView

import os
_TRACE = bool(os.environ.get('IC002_TRACE'))
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
        return any(self.buffers.matches(buf.rsplit(".", 1)[-1]) for buf in facts.gathers)

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
    ) -> None:
        self.rule = rule
        self.view = view
        self.flow = flow
        self.switch = switch  # the call in the flow
        made = made if made is not None else switch  # the call of the switch it makes (through a partial)
        self.summaries = view.ctx.summaries(rule.depth)
        self.receiver = receiver or (ref(made.func.value) if isinstance(made.func, ast.Attribute) else None)
        self.owner = view.owner()
        self.canon_receiver = canonical_name(self.receiver, dotted_aliases(view.node)) if self.receiver else None
        self._loop_hits: dict[tuple[int, int], bool] = {}
        self._per_function: dict[int, tuple[dict, set[int]]] = {}

    def _locals(self, flow: Flow) -> tuple[dict, set[int]]:
        """(the partials bound to locals, the nodes that gather a top-k buffer in place) of
        the function a flow is of."""
        key = id(flow.func)
        got = self._per_function.get(key)
        if got is None:
            got = self._per_function[key] = (partials(flow.func), topk_gathers(flow.func, self.rule.buffers))
        return got

    # -- classification of one event ----------------------------------------------------------
    def classify(self, node, aliases: dict[str, str], fn: FunctionInfo | None, self_cls: ClassInfo | None, flow: Flow, forward: bool, start: int | None = None) -> str | None:
        if node.kind == "cond":
            return "vacuous" if any(flow.empty(atom) for atom in node.atoms) else None
        if node.kind == "store":
            return "hit" if id(node.node) in self._locals(flow)[1] else None
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
        if node.kind != "call":
            return None
        call = node.node
        rule = self.rule
        bound, gathers = self._locals(flow)
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
            return "hit" if self._same_model(canonical_name(recv, aliases) if recv else None) else None
        callee = ref(call.func)
        canon = canonical_name(callee, aliases) if callee else None
        if name in rule.forward_names or (canon is not None and canon in self._owners()):
            return "fwd"
        if fn is None or callee is None:
            return None
        sym = self.summaries.resolve(fn, callee, self_cls)
        target = self.summaries.function_for(sym)
        if target is None:
            return None
        sub_self = self_cls if (callee.startswith("self.") and callee.count(".") == 1) or callee.startswith("super().") else target.owner()
        compacts = rule.compacts(self.summaries, target, sub_self)
        forwards = rule.forwards(self.summaries, target, sub_self)
        if compacts and forwards:
            return "mixed"
        if compacts:
            return "hit"
        if forwards:
            return "fwd"
        return None

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
        known = flow.known_at(idx, fixed=True)
        in_forward_loop = any(
            any(self.classify(flow.nodes[m], aliases, fn, self.owner, flow, True, idx) == "fwd" for m in loop.members if flow.nodes[m].kind == "call")
            for loop in flow.loops_of(idx)
        )
        verdict = Verdict(ok=False)
        sides = []
        partial: set[int] = set()
        for forward in (False, True):
            stop = self._stopper(aliases, fn, self.owner, flow, forward, idx)
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
            if _TRACE:
                print("TRACE", "fwd" if forward else "back", {k: [[(flow.nodes[i].node.lineno if i >= 0 and flow.nodes[i].node is not None and hasattr(flow.nodes[i].node, 'lineno') else i) for i in p[-1:]] for p in v] for k, v in paths.items()})
        # step 0 ran in this function: every path into the switch comes from a forward
        proposal = bool(sides[0][0]) and not sides[0][1]
        for forward, (uncovered, ends) in zip((False, True), sides):
            if uncovered:
                continue
            if not ends:
                verdict.ok = True
                return verdict
            # the window goes on in the callers
            outcome = self._through_callers(fn, forward, known, CALLER_DEPTH, verdict)
            if _TRACE:
                print("TRACE callers", forward, outcome, verdict.via)
            if outcome == "covered":
                verdict.ok = True
                return verdict
            if forward and outcome == "unknown" and proposal:
                # no draft step follows in this proposal (a test that flips the switch and
                # asserts; a path that returns before the loop)
                verdict.ok = True
                return verdict
            if outcome == "unknown" and self._reachable_sibling_compacts():
                verdict.ok = True
                verdict.left_to_guard = True
                return verdict
        verdict.partial = [f"line {flow.nodes[i].node.lineno}" for i in sorted(partial)]
        return verdict

    def _stopper(self, aliases, fn, self_cls, flow: Flow, forward: bool, start: int):
        def stop(node):
            return self.classify(node, aliases, fn, self_cls, flow, forward, start)
        return stop

    def _assume(self, atom) -> bool | None:
        """`hasattr(x, "compact_topk_indices")` is true: a model without it is IC003's finding."""
        source = atom[0]
        if source.startswith("hasattr(") and (f"'{self.rule.compaction}'" in source or f'"{self.rule.compaction}"' in source):
            return True
        return None

    def _through_callers(self, fn: FunctionInfo | None, forward: bool, known: dict[str, bool], depth: int, verdict: Verdict) -> str:
        """'covered' if every caller covers the rest of the window on this side, 'open' if
        one does not, 'unknown' if no caller is known (or, after the switch, a caller's path
        ends where no caller is known)."""
        if fn is None or depth <= 0:
            return "unknown"
        owner = self.owner if self.owner is not None else fn.owner()
        sites = list(caller_sites(fn, owner))
        if not sites:
            return "unknown"
        stable_self = {a: p for a, p in known.items() if a.startswith("self.")}
        outcome = "covered"
        for caller, node, call in sites:
            flow = FieldFlow(node)
            idx = flow.by_call.get(id(call))
            if idx is None:
                return "open"
            aliases = dotted_aliases(node)
            stop = self._stopper(aliases, caller, owner, flow, forward, idx)
            known_here = dict(flow.known_at(idx, fixed=True))
            known_here.update(stable_self)
            paths = flow.search(idx, forward, stop, known_here, self._assume)
            uncovered = paths.get("fwd", []) + (paths.get("mixed", []) if forward else [])
            if uncovered:
                return "open"
            verdict.via.append(caller.qual)
            if paths.get("end"):
                if not forward:
                    return "open"  # further up: the order is not in the source
                further = self._through_callers(caller, forward, known_here, depth - 1, verdict) if depth > 1 else "open"
                if further == "open":
                    return "open"
                if further == "unknown":
                    outcome = "unknown"
        return outcome

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


# -- helpers ------------------------------------------------------------------------------------


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
    if isinstance(call.func, ast.Name):
        target = aliases.get(call.func.id)
        if target and "." in target:
            return call_of(target, call)
    return call


def call_of(spelled: str, call: ast.Call) -> ast.Call:
    """`call` with its callee replaced by the dotted `spelled`."""
    try:
        func = ast.parse(spelled, mode="eval").body
    except SyntaxError:
        return call
    return ast.copy_location(ast.Call(func=func, args=call.args, keywords=call.keywords), call)


def attribute_calls(owner: ClassInfo, attr: str):
    """(method, its ast node, the call) for each call `self.<attr>(...)` in the methods of a
    class and its bases."""
    word = Words(attr)
    for cls in owner.classes():
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
            seen.setdefault(sub.targets[0].id, set()).add(ref(sub.value))
        elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)) and isinstance(sub.target, ast.Name):
            seen.setdefault(sub.target.id, set()).add(ref(sub.value) if isinstance(sub, ast.AnnAssign) and sub.value else None)
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1 and None not in v}


def canonical_name(name: str, aliases: dict[str, str]) -> str:
    for _ in range(8):
        head, dot, rest = name.partition(".")
        target = aliases.get(head)
        if target is None or target == head:
            break
        name = target + dot + rest
    return name


def caller_sites(fn: FunctionInfo, owner: ClassInfo | None):
    """(caller, its ast node, the call) for each call of `fn` whose caller the source shows:
    `self.<fn>(...)` in the methods of its class and their bases, and a nested function
    called by name in the function that defines it."""
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
        return
    word = Words(name)
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


