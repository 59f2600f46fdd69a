"""Which attention metadata a draft loop passes stale to its forwards (IC005's question, asked
of one function).

- *What is asked about.* `MetadataQuery` names it: the metadata names, the calls that run a
  forward, refresh metadata or advance the inputs, the advanced fields, how deep helpers are
  followed.
- *The cheap look.* `passed_metadata` gives the metadata names a call in the function's loops
  is given (through a local `functools.partial`, spelled through the local aliases), and
  those passed as a local copy of an attribute (`md = self.attn_metadata` before the loop).
- *The steps of the loop.* `MetadataSteps` judges the events of the function's flow for one
  metadata name: a forward that receives it (`is_forward`), an advance of the draft inputs
  (`is_advance`), a rebuild or refresh of it (`is_refresh`, through any name holding the same
  object: `links`), and `stale_uses`, the paths from an advance to the loop's next forward
  that cross no refresh.
- `stale_metadata` puts them together: one `StaleUse` per loop and metadata name, as a
  finding reports it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

from .facts import last_name, ref
from .fields import FieldFlow, bound_offset, canonical, class_of, fills, flows_to, handed_attributes, parameter_index, resolve_call, writes_at
from .flow import Loop, Node
from .needs import Names
from .objects import aliases_of, bound_value, container_copy_of, copy_of, held_values, partials, through_partial
from .project import FunctionInfo
from .steps import advances_fields, changed_before_use, loop_calls_and_aliases, passed_values, skipping_branches
from .views import FunctionView

# in-place methods of a dict of per-layer metadata that give it new entries
DICT_REFRESH = frozenset({"update", "setdefault", "__setitem__"})


@dataclass(frozen=True)
class MetadataQuery:
    """What the question is about: `metadata` (the names that hold attention metadata),
    `forwards` (last names of calls that run the draft model with the metadata they receive),
    `refreshes` (of calls that rebuild or refresh the metadata they receive), `advancing` (of
    calls that advance the draft inputs), `fields` (fields and locals whose increment advances
    them), `depth` (how many helper calls deep they are looked for)."""

    metadata: Names
    forwards: frozenset[str]
    refreshes: frozenset[str]
    advancing: frozenset[str]
    fields: frozenset[str]
    depth: int


@dataclass
class StaleUse:
    """Metadata `metadata` passed to `forward` (an event of the function's flow, a call) on
    every step of `loop`, while `advance` (an event: a call, a bind or a store) moves the
    draft inputs with no rebuild or refresh of it before that forward."""

    loop: Loop
    metadata: str
    advance: Node
    forward: Node


def stale_metadata(view: FunctionView, query: MetadataQuery) -> Iterator[StaleUse]:
    """The metadata a loop of the function passes to its forwards after the inputs advance,
    unrefreshed: at most one per loop and metadata name, names in sorted order."""
    func = view.node
    names, snapshots, aliases = passed_metadata(func, query.metadata)
    if not names:
        return
    steps = MetadataSteps(view, func, aliases, query, snapshots)
    reported: set[tuple[int, str]] = set()
    for md in sorted(names):
        for loop, advance, forward in steps.stale_uses(md):
            key = (id(loop.node), md)
            if key in reported:
                continue
            reported.add(key)
            yield StaleUse(loop, md, steps.flow.nodes[advance], steps.flow.nodes[forward])


def passed_metadata(func: ast.AST, metadata: Names) -> tuple[set[str], set[str], dict[str, str]]:
    """(the names matching `metadata` that a call in the function's loops is given, spelled
    through its local aliases; those of them a local holding what an attribute held passes;
    the local aliases). A call of a local `functools.partial(...)` is given what it binds."""
    calls, aliases = loop_calls_and_aliases(func)
    bound = partials(func) if any(isinstance(c.func, ast.Name) for c in calls) else {}
    names: set[str] = set()
    snapshots: set[str] = set()
    for call in calls:
        for arg in passed_values(through_partial(call, bound) if bound else call):
            spelled = canonical(ref(arg), aliases)
            if spelled and metadata.matches(spelled.rsplit(".", 1)[-1]):
                names.add(spelled)
                if isinstance(arg, ast.Name) and spelled != arg.id and "." in spelled:
                    snapshots.add(spelled)  # a local holding what an attribute held
    return names, snapshots, aliases


class MetadataSteps:
    """The judgement of the events of one function's flow (`FieldFlow`) for a metadata name:
    which calls are forwards that receive it, which events advance the draft inputs, which
    refresh it, and the stale uses those leave. `aliases`: the function's local aliases;
    `snapshots`: the metadata names passed as a local copy of an attribute (which does not see
    the attribute bound anew)."""

    def __init__(self, view: FunctionView, func: ast.AST, aliases: dict[str, str], query: MetadataQuery,
                 snapshots: set[str] | frozenset[str] = frozenset()) -> None:
        self.query = query
        self.view = view
        self.func = func
        self.aliases = aliases
        self.summaries = view.ctx.summaries(query.depth)
        self.flow = FieldFlow(func)
        self._targets: dict[int, tuple[str, FunctionInfo | None]] = {}
        self._advances: dict[int, bool] = {}
        self._links: dict[str, set[str]] = {}
        # calls of a local `functools.partial(...)` are judged as the calls they make
        self._partials = partials(func)
        self.snapshots = set(snapshots)

    def call_at(self, n: int) -> ast.Call:
        """The call event `n` makes (a local `functools.partial` unwrapped)."""
        call = self.flow.nodes[n].node
        return through_partial(call, self._partials) if self._partials else call

    # -- one call --------------------------------------------------------------------------------
    def target(self, call: ast.Call) -> tuple[str, FunctionInfo | None]:
        """What a call resolves to: its spelling and the project function it reaches, or None."""
        got = self._targets.get(id(call))
        if got is None:
            got = self._targets[id(call)] = resolve_call(self.view, call)
        return got

    def receives(self, call: ast.Call, md: str) -> bool:
        """Whether the call is given `md` (through the local aliases)."""
        return any(canonical(ref(a), self.aliases) == md for a in passed_values(call))

    def params_receiving(self, call: ast.Call, fn: FunctionInfo, md: str) -> list[int]:
        """The parameters of `fn` that the call binds to `md`."""
        offset = bound_offset(call.func, fn)
        return parameter_index(fn, call, offset, lambda a: canonical(ref(a), self.aliases) == md)

    def is_forward(self, n: int, md: str) -> bool:
        """Whether event `n` is a call that runs a forward with `md`: a `forwards` call given
        it, or a project function that passes that parameter on to one."""
        node = self.flow.nodes[n]
        if node.kind != "call":
            return False
        call = self.call_at(n)
        if not self.receives(call, md):
            return False
        if last_name(call.func) in self.query.forwards:
            return True
        _, fn = self.target(call)
        if fn is None:
            return False
        forwards = self.query.forwards
        test = lambda c: c.name in forwards
        key = f"forward:{sorted(forwards)}"
        return any(flows_to(self.summaries, fn, i, test, key) for i in self.params_receiving(call, fn, md))

    def is_advance(self, n: int) -> bool:
        """Whether event `n` advances the draft inputs (see `steps.advances_fields`)."""
        got = self._advances.get(n)
        if got is None:
            got = self._advances[n] = self._is_advance(n)
        return got

    def _is_advance(self, n: int) -> bool:
        query = self.query
        return advances_fields(self.flow, n, fields=query.fields, advancing=query.advancing, depth=query.depth,
                               summaries=self.summaries, aliases=self.aliases, call_at=self.call_at,
                               resolve=lambda call: self.target(call)[1])

    def links(self, md: str) -> set[str]:
        """`md` and what holds the same object or its entries (`per_layer = {k: md ...}`,
        `md_i = per_layer[k]`): an update in place through any of them updates `md`."""
        got = self._links.get(md)
        if got is None:
            got = self._links[md] = {md} | {canonical(a, self.aliases) or a for a in aliases_of(self.func, md)}
        return got

    def is_refresh(self, n: int, md: str) -> bool:
        """Whether event `n` rebuilds or refreshes `md`: a new binding of it (not a copy of
        the same entries), a store into it or an alias of it, a write of its own fields, a
        `refreshes` call or dict update given it, a project function that passes it to one or
        fills it, a method of its class that updates it in place."""
        node = self.flow.nodes[n]
        links = self.links(md)
        if node.kind == "bind" and node.name == md:
            # a new object, unless it holds the same entries or values (`dict(md)`,
            # `{**md, **extra}`, `copy.copy(md)`, `md = other_alias`, `{n: common for n in
            # layers}`)
            value = bound_value(node.node, md)
            if value is None:
                return True
            if not isinstance(value, ast.Call) and ref(value) is not None:
                # another name's object: new unless that name held `md`'s object already
                before = {md} | {canonical(a, self.aliases) or a for a in aliases_of(self.func, md, skip=node.node)}
                return (canonical(ref(value), self.aliases) or ref(value)) not in before
            made = copy_of(value, self.aliases)
            sources = container_copy_of(value) | held_values(value) | ({made.source} if made is not None and not made.given else set())
            if not sources:
                return True
            # a copy holds the entries (values) of what it copies: new only when that was
            # itself bound anew in this loop
            loops = self.flow.loops_of(n)
            if not loops:
                return True
            bound_here = {self.flow.nodes[i].name for i in loops[-1].members if self.flow.nodes[i].kind == "bind" and i != n}
            if _merges_in_new(value, bound_here):
                return True  # `{**per_layer, **dict.fromkeys(names, md)}` with this step's `md`
            return any(src.split(".")[0] in bound_here for src in sources)
        if node.kind == "store" and canonical(node.name, self.aliases) in links:
            # `md[layer] = ...`, `self.md = ...`, through an alias of the dict; a local that
            # took `self.md` before does not see `self.md` bound anew
            if md in self.snapshots and isinstance(self.flow.targets.get(n), ast.Attribute):
                return False
            return not self._stores_what_it_held(n, links)
        if node.kind in ("store", "call") and any(
            w.obj in links and w.kind == "set" for w in writes_at(self.flow, n, self.aliases)
        ):
            # the metadata's own fields moved with the inputs, in place (whether the fields
            # derived from them moved too is IC004's question)
            return True
        if node.kind != "call":
            return False
        call = self.call_at(n)
        name = last_name(call.func)
        recv = canonical(ref(call.func.value), self.aliases) if isinstance(call.func, ast.Attribute) else None
        if recv in links and name in DICT_REFRESH | self.query.refreshes:
            return True
        if self._writes_a_handed_field(call, links):
            return True
        receives = self.receives(call, md)
        if name in self.query.refreshes and (receives or any(self.receives(call, a) for a in links)):
            return True
        head, _, attr = md.partition(".")
        own_method = head == "self" and attr and "." not in attr and recv == "self"
        if not (receives or recv == md or own_method):
            return False  # a call that is not given the metadata cannot refresh it
        _, fn = self.target(call)
        if fn is None and recv == md:
            # `attn_md.advance_step(...)` with `attn_md = Meta(...)` (or annotated, a copy):
            # the method of the object's class
            cls = class_of(self.view, md, self.aliases)
            fn = cls.method(name) if cls is not None and name else None
        if fn is None:
            return False
        if recv == md and bound_offset(call.func, fn) and self.summaries.fields_written(fn, 0):
            return True  # a method of the metadata's class that updates it in place
        refreshes = self.query.refreshes | DICT_REFRESH
        test = lambda c: c.name in refreshes
        key = f"refresh:{sorted(refreshes)}"
        for i in self.params_receiving(call, fn, md):
            if flows_to(self.summaries, fn, i, test, key) or fills(self.summaries, fn, i):
                return True
            if i >= bound_offset(call.func, fn) and self.summaries.fields_written(fn, i):
                # the helper moves the metadata's own fields with the inputs, in place (as a
                # write of them in the loop does)
                return True
        # `self.md` written by a method of the same instance (bound anew: not for a local
        # that took it before)
        if own_method:
            return any(a == attr and not (md in self.snapshots and op == "=") for a, op, _d in self.summaries.fields_written(fn, 0))
        return False

    def _writes_a_handed_field(self, call: ast.Call, links: set[str]) -> bool:
        """`advance_seq_lens(md.seq_lens, n)`: a field of the metadata handed to a function
        (of any module, a kernel's wrapper) that writes the tensor it is given in place: the
        metadata's own fields move with the inputs, as a write of them in the loop does."""
        from .tensor_writes import argument_writes

        handed = [arg for arg, base in handed_attributes(call) if canonical(ref(base.value), self.aliases) in links]
        if not handed:
            return False
        _, fn = self.target(call)
        if fn is None:
            return False
        offset = bound_offset(call.func, fn)
        return any(
            argument_writes(self.summaries, fn, i) is not None
            for arg in handed
            for i in parameter_index(fn, call, offset, lambda a, arg=arg: a is arg)
        )

    def _stores_what_it_held(self, n: int, links: set[str]) -> bool:
        """Whether store event `n` puts back an object the metadata already held, one the
        loop never binds anew (`per_layer[name] = attn_metadata`, the step-0 build, while the
        step's own build went to another name): the entries are the stale ones."""
        stmt = self.flow.nodes[n].node
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
            return False
        spelled = ref(stmt.value)
        if spelled is None:
            return False
        spelled = canonical(spelled, self.aliases) or spelled
        loops = self.flow.loops_of(n)
        if spelled not in links or not loops:
            return False
        nodes = self.flow.nodes
        # bound anew anywhere in the step: the outermost loop (a store loop over the layers
        # sits inside it)
        renewed = {nodes[i].name for i in loops[0].members if nodes[i].kind in ("bind", "store") and i != n}
        return spelled not in renewed and spelled.split(".", 1)[0] not in renewed

    # -- paths ------------------------------------------------------------------------------------
    def stale_uses(self, md: str) -> Iterator[tuple[Loop, int, int]]:
        """(loop, advance, forward): the inputs advance and the loop's next forward is given
        `md` with no rebuild or refresh of it in between."""
        flow = self.flow
        members: set[int] = set()
        for loop in flow.loops:
            members |= loop.members
        forwards = [n for n in sorted(members) if self.is_forward(n, md)]
        if not forwards:
            return
        refresh_memo: dict[int, bool] = {}

        def refresh(n: int) -> bool:
            got = refresh_memo.get(n)
            if got is None:
                got = refresh_memo[n] = self.is_refresh(n, md)
            return got

        # an `if` the source cannot decide that skips a refresh: taken as not taken when the
        # inputs moved, unless the branch without it runs a forward of its own (an eager
        # branch that rebuilds, a CUDA-graph `else:` that replays with what it was handed)
        assumed = skipping_branches(flow, self.func, refresh, unless=lambda n: self.is_forward(n, md))
        yield from changed_before_use(flow, forwards, refresh, self.is_advance, assumed)


def _merges_in_new(value: ast.AST, bound_here: set[str]) -> bool:
    """A container copy whose later entries are new: `{**old, **new}` or `dict(old, **new)`
    where `new` is built there or names an object the loop binds anew (its entries override
    the old ones)."""
    if isinstance(value, ast.Dict):
        parts = [v for k, v in zip(value.keys, value.values) if k is None][1:]
    elif isinstance(value, ast.Call) and last_name(value.func) == "dict" and value.args:
        parts = [k.value for k in value.keywords]
    else:
        return False

    def new(expr: ast.AST) -> bool:
        spelled = ref(expr)
        if spelled is not None:
            return spelled.split(".")[0] in bound_here
        names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
        return bool(names & bound_here)

    return any(new(e) for e in parts)
