"""Which derived fields a draft step leaves stale (IC004's question, asked of one function).

- *Advances.* `advances` gives every write of a field something derives from: an advance
  (`x.seq_lens += k`, `x.seq_lens.add_(k)`, `x.seq_lens = x.seq_lens + k`, `out=`, a copy or
  constructor given the advanced value), and any write of a field a memo is filled from;
  `written_through_calls` the fields handed to a function (of any module, a Triton kernel)
  that writes them in place. `may_write_a_source` is the cheap look for either, asked before
  the function's aliases are worked out; `increment_need` the prefilter's spelling of it.
- *The step around an advance.* `DraftStep` judges each write: the fields derived from the
  written one (the learned table, `learned_table`, and the memos and constructors of the
  object's class) that the object is known to have, and whether the step updates them after
  the write, on every path, or its callers do around the call when the object is a parameter
  (a returned copy: where the callers bind it).
- `stale_derived` puts the two together: the writes that leave derived fields stale, grouped
  as one finding reports them (`StaleWrites`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Iterator

from .derivations import (
    STEP_GLOBS,
    Derivation,
    Table,
    agreed,
    bundled,
    configured,
    holds_layout,
    in_family,
    layout_state,
    memo_reader,
    memos_of,
    module_advances,
    module_derivations,
    snapshots_of,
    step_field,
    variant_of,
)
from .facts import last_name, ref, walk_local
from .fields import (
    FieldFlow,
    FieldWrite,
    Moved,
    Passed,
    Stored,
    bound_offset,
    call_argument,
    call_writes,
    callers,
    canonical,
    class_fields,
    class_of,
    cached_properties,
    copied_from,
    covered,
    declared_data,
    filled_from,
    handed_attributes,
    inherited_callers,
    local_aliases,
    mentioned_fields,
    moves_unchanged,
    parameter_index,
    parents,
    resolve_call,
    resolver_for,
    statement_of,
    store_targets,
    store_writes,
    variants,
)
from .needs import All as AllNeed
from .needs import Any as AnyNeed
from .needs import Names, Need, Words
from .objects import fresh_copy_each_pass, handed_on
from .summaries import Summaries
from .tensor_writes import ADVANCES, argument_writes
from .views import FunctionView


@dataclass
class StaleWrites:
    """Writes of one object reported together, and what they leave stale: `writes` (the write,
    the node it is an event of, the derived fields it leaves stale), `stale` (all of them, in
    order), `via` (the callers that leave them so, `qual` at path:line, sorted) and `evidence`
    (the derivation that shows each stale field)."""

    writes: list[tuple[FieldWrite, ast.AST, list[str]]]
    stale: list[str]
    via: list[str]
    evidence: dict[str, Derivation]


# -- what a definition must contain ------------------------------------------------------------


def learned_table(extra: dict[str, list[str]]) -> Table:
    """What the generator learned from the releases, and what the configuration adds."""
    return Table(list(bundled()) + configured(extra))


def increment_need(table: Table) -> Need:
    """A source field moved by arithmetic (see `fields.Moved`), a memo's source written
    (`x.query_start_loc = ...`), or a source handed to a call that may write it in place.
    Derived from the learned table: a memo of a project class that reads a field no release's
    memo reads is found where the write is spelled as an advance, or with `--no-prefilter`."""
    sources = sorted(table.sources() | {variant_of(s) for s in table.sources()})
    handed = sorted(table.stepped_sources())
    exact = sorted(table.exact_sources() | {variant_of(s) for s in table.exact_sources()})
    # as `may_write_a_source` reads a function: a field a draft step moves, handed to a call
    # (as `x.seq_lens`, or a slice of it) or stored to; a field a memo reads, stored to where
    # a loop can reuse the object (any write stales a memo, and one outside a loop is not judged).
    # A length of the layout no release names (`STEP_GLOBS`) is each of these too: what the
    # project derives from it is learned where the object's class is read (handed to a call
    # anywhere: a helper may advance it).
    layout = STEP_GLOBS
    loop = Words("for", "while")
    parts: list[Need] = [
        Moved(sources, layout),
        Passed(Names(handed, case_sensitive=True), attribute=True),
        Stored(handed),
        Passed(Names(layout, case_sensitive=True), attribute=True),
        AllNeed(Stored(exact, layout), loop),
        # outside a loop, where the function fills the memo itself before the write
        # (`md.token_to_seq()`, then `md.query_start_loc = ...`)
        Stored(exact),
    ]
    return AnyNeed(*parts)


# -- the query -------------------------------------------------------------------------------------


def stale_derived(view: FunctionView, table: Table, depth: int) -> Iterator[StaleWrites]:
    """The advances of the function that leave derived fields of the same object stale, grouped
    as they are reported (the keywords of one copy, the statements of one block that change one
    object's layout), in the order of their first write. Each derived field of an object is
    named once, at its first stale write. `table`: the learned table (`learned_table`);
    `depth`: how far helpers and callers are followed."""
    func = view.node
    # the fields a write names do not depend on the names of the objects: a function with
    # no candidate at all is left before its aliases are worked out
    if not may_write_a_source(func, table):
        return
    aliases = local_aliases(func, view)
    found = list(advances(func, aliases, table))
    found += list(written_through_calls(view, func, aliases, table, depth))
    if not found:
        return
    found.sort(key=lambda wa: (getattr(wa[1], "lineno", 0), getattr(wa[1], "col_offset", 0)))
    step = DraftStep(table, depth, view, func, aliases)
    reported: set[tuple[str | None, str]] = set()
    groups: list[dict[str, Any]] = []
    for write, at in found:
        wanted = [d for d in step.wanted(write) if (write.obj, d) not in reported]
        if not wanted:
            continue
        stale, via = step.stale(write, at, wanted)
        if not stale:
            continue
        reported.update((write.obj, d) for d in stale)
        evidence = step.evidence(write, stale)
        key = _group_key(write, at, step.parent)
        group = next((g for g in groups if g["key"] == key), None)
        if group is None:
            groups.append({"key": key, "writes": [(write, at, stale)], "stale": list(stale), "via": list(via), "evidence": dict(evidence)})
        else:
            group["writes"].append((write, at, stale))
            group["stale"] += [d for d in stale if d not in group["stale"]]
            group["via"] += [v for v in via if v not in group["via"]]
            group["evidence"].update(evidence)
    for g in groups:
        yield StaleWrites(g["writes"], g["stale"], sorted(g["via"]), g["evidence"])


# -- advances ------------------------------------------------------------------------------------


def advances(func: ast.AST, aliases: dict[str, str], table: Table) -> Iterator[tuple[FieldWrite, ast.AST]]:
    """(write, the node it is an event of: the store target or the call) for every advance of
    a source field, and every write of a field a memo may be filled from (any direction: the
    memo is exact). Whether the object has such a memo is asked later (`DraftStep.wanted`)."""
    for sub in walk_local(func):
        if isinstance(sub, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for t in targets:
                for piece in store_targets(t):
                    for w in store_writes(piece, sub, aliases):
                        if source_write(w, table) and not (w.sign is None and moves_unchanged(sub, func, aliases)):
                            yield w, piece
        elif isinstance(sub, ast.Call):
            for w in call_writes(sub, aliases):
                if w.kind in ("set", "new") and source_write(w, table):
                    yield w, sub


def may_write_a_source(func: ast.AST, table: Table) -> bool:
    """A cheap look for a write `advances` or `written_through_calls` could report, before
    the function's aliases are worked out: an advance of a source (`x.f += k`,
    `x.f = x.f + k`, `x.f.add_(k)`, `out=`), a copy or constructor given a source, a source
    handed to a call; and, in a function with a loop (where a memo's staleness is judged), any
    store of a field a memo reads."""
    sources = table.sources()
    handed = table.stepped_sources()
    exact = table.exact_sources()
    has_loop = False
    sums: dict[str, ast.AST] = {}
    # (types compared, not `isinstance`: this look runs over every node of every candidate)
    nodes = [sub for sub in walk_local(func) if type(sub) in _MAY_WRITE]
    for sub in nodes:
        kind = type(sub)
        if kind in _LOOPS:
            has_loop = True
        elif kind is ast.Assign and isinstance(sub.value, ast.BinOp):
            sums.update((t.id, sub.value) for t in sub.targets if isinstance(t, ast.Name))

    def named(node: ast.AST, names: set[str], layout: bool = True) -> bool:
        # `layout`: a layout field no release derives from counts too (see `source_write`)
        if isinstance(node, ast.Subscript):
            node = node.value
        if not isinstance(node, ast.Attribute):
            return False
        return node.attr in names or variant_of(node.attr) in names or (layout and step_field(node.attr))

    for sub in nodes:
        kind = type(sub)
        if kind is ast.AugAssign:
            if named(sub.target, sources):
                return True
        elif kind is ast.Assign or kind is ast.AnnAssign:
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for t in targets:
                if not named(t, sources):
                    continue
                value = sub.value
                if isinstance(value, ast.Name):
                    value = sums.get(value.id, value)  # `new = md.seq_lens + 1; md.seq_lens = new`
                if has_loop or isinstance(value, ast.BinOp):
                    return True
                if named(t, exact, layout=False) and _called_on_before(nodes, ref(t.value), sub.lineno):
                    return True  # a memo this function may have filled (judged in `wanted`)
                # a builder filling a layout field from a call is no step, unless a release
                # derives something from that field
                if isinstance(value, (ast.Call, ast.IfExp)) and named(t, sources, layout=False):
                    return True
        elif kind is ast.Call:
            f = sub.func
            if isinstance(f, ast.Attribute) and f.attr.endswith("_") and named(f.value, sources):
                return True
            name = last_name(f) or ""
            if name == "replace" or name[:1].isupper():
                # a layout length no release names: in a loop, or advanced right there
                # (`replace(md, cache_lens=md.cache_lens + n)`)
                if any(k.arg and (k.arg in sources or variant_of(k.arg) in sources
                                  or (step_field(k.arg) and (has_loop or isinstance(k.value, ast.BinOp)))) for k in sub.keywords):
                    return True
            if any(k.arg == "out" and named(k.value, sources) for k in sub.keywords):
                return True
            if writes_only_by_syntax(sub):
                continue  # as `written_through_calls`
            # a layout field handed to a call (a draft loop launching a kernel that advances
            # it, a helper adding to it); the releases' stepped fields anywhere
            if any(named(a, handed) for a in sub.args) or any(named(k.value, handed) for k in sub.keywords if k.arg != "out"):
                return True
    return False


def _called_on_before(nodes: list[ast.AST], receiver: str | None, line: int) -> bool:
    """Whether a method of `receiver` is called before `line` (`md.token_to_seq()`)."""
    if receiver is None:
        return False
    return any(
        type(n) is ast.Call and n.lineno < line and isinstance(n.func, ast.Attribute) and ref(n.func.value) == receiver
        for n in nodes
    )


_LOOPS = frozenset({ast.For, ast.AsyncFor, ast.While})
_MAY_WRITE = _LOOPS | {ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Call}


def source_write(w: FieldWrite, table: Table) -> bool:
    """An advance of a field something derives from, or any write of a field a memo reads. A
    field that is itself derived (`_seq_lens_cpu`, `max_seq_len`) and that no draft step moves
    as a source is being brought along, not moved: its own advance is the catch-up; the
    layout itself (`positions`, `seq_lens`: see `derivations.layout_state`) is moved, whatever
    some constructor computes it from."""
    names = {w.field, variant_of(w.field)}
    if w.sign == 1:
        if not (names & table.sources()):
            # a layout field no release derives from: what the object's class derives from it
            # is learned from the project (`DraftStep.wanted`)
            return step_field(w.field)
        return bool(names & table.moving_sources()) or not (names & table.derived_fields()) or layout_state(w.field)
    return bool(names & table.exact_sources()) or (step_field(w.field) and not (names & table.sources()))


def written_through_calls(view: FunctionView, func: ast.AST, aliases: dict[str, str], table: Table, depth: int) -> Iterator[tuple[FieldWrite, ast.AST]]:
    """`kernel(seq_lens=md.seq_lens, ...)`, `helper(md.positions)`: a field handed to a
    function (of any module, a Triton kernel through its wrappers and dispatchers) that writes
    it in place; an advance when the function adds to it."""
    # the fields a draft step advances through a kernel or helper (`seq_lens`, ...): a call
    # given a field only a memo reads is judged where the memo is (the layout's own writes)
    sources = table.stepped_sources()
    summaries = None
    # a layout field no release derives from, handed to a call: advanced by it anywhere
    # (`add_rows(md.kv_lens, idx, n)`), written in a way of unknown direction in a loop only
    in_loop = any(isinstance(sub, (ast.For, ast.AsyncFor, ast.While)) for sub in walk_local(func))
    for sub in walk_local(func):
        if not isinstance(sub, ast.Call):
            continue
        handed = []
        for arg, base in handed_attributes(sub):
            stepped = base.attr in sources or variant_of(base.attr) in sources
            if stepped or step_field(base.attr):
                obj = canonical(ref(base.value), aliases)
                if obj is not None:
                    handed.append((arg, obj, base.attr, stepped or in_loop))
        if not handed:
            continue
        if writes_only_by_syntax(sub):
            continue
        fn = resolve_call(view, sub)[1]
        if fn is None:
            continue
        if summaries is None:
            summaries = view.ctx.summaries(depth)
        offset = bound_offset(sub.func, fn)
        for arg, obj, field, any_write in handed:
            indices = parameter_index(fn, sub, offset, lambda a, arg=arg: a is arg)
            for index in indices:
                got = argument_writes(summaries, fn, index, depth)
                if got is None or (got != ADVANCES and not any_write):
                    continue
                yield FieldWrite(obj, field, "set", 1 if got == ADVANCES else None, sub, isinstance(arg, ast.Subscript)), sub
                break



def writes_only_by_syntax(call: ast.Call) -> bool:
    """torch's, numpy's and the builtins' calls write only through `out=` and in-place
    methods (read from the syntax): a tensor handed to them is not written through them."""
    func = call.func.value if isinstance(call.func, ast.Subscript) else call.func
    spelled = ref(func) or ""
    return spelled.split(".", 1)[0] in _NO_WRITES_THROUGH or spelled in _NOT_READERS


_NO_WRITES_THROUGH = frozenset({"torch", "np", "numpy", "math", "F", "int", "float", "min", "max", "sum", "list", "tuple", "dict", "range", "zip", "enumerate", "sorted", "any", "all"})
_NOT_READERS = frozenset({"getattr", "setattr", "hasattr", "isinstance", "len", "id", "type", "print", "repr", "str"})


def _group_key(write: FieldWrite, at: ast.AST, parent: dict[int, ast.AST]) -> tuple:
    """Writes reported together: the keywords of one copy, and the statements of one block
    that change one object's layout (`md.num_actual_tokens = n`, `md.query_start_loc = ...`)."""
    if write.kind == "new":
        return (write.obj, "call", id(write.node))
    stmt = statement_of(at, parent) if not isinstance(at, ast.stmt) else at
    block = parent.get(id(stmt)) if stmt is not None else None
    return (write.obj, "block", id(block))


def spells_write(call: ast.Call, field: str) -> bool:
    """The call's own syntax writes the field (`x.f.add_(k)`, `out=x.f`), not a callee."""
    func = call.func
    if isinstance(func, ast.Attribute):
        holder = func.value.value if isinstance(func.value, ast.Subscript) else func.value
        if isinstance(holder, ast.Attribute) and holder.attr == field:
            return True
    return any(k.arg == "out" for k in call.keywords)


# -- the step around an advance -----------------------------------------------------------------------


class DraftStep:
    """The judgement of a function's advances, one by one: which fields derived from the written
    one the object is known to have (`wanted`), which of them the step leaves stale, and the
    callers that leave them so when the object is a parameter or the copy is returned
    (`stale`), and the derivations that show it (`evidence`). `table`: the learned table;
    `depth`: how far helpers and callers are followed."""

    def __init__(self, table: Table, depth: int, view: FunctionView, func: ast.AST, aliases: dict[str, str]) -> None:
        self.table = table
        self.depth = depth
        self.view = view
        self.func = func
        self.aliases = aliases
        self.summaries: Summaries = view.ctx.summaries(depth)
        self._flow: FieldFlow | None = None
        self._parents: dict[int, ast.AST] | None = None
        self._sites: list | None = None
        self._derivations: dict[tuple, list[Derivation]] = {}

    @property
    def flow(self) -> FieldFlow:
        if self._flow is None:
            self._flow = FieldFlow(self.func)
        return self._flow

    @property
    def parent(self) -> dict[int, ast.AST]:
        if self._parents is None:
            self._parents = parents(self.func)
        return self._parents

    def derivations(self, write: FieldWrite) -> list[Derivation]:
        """What is derived from the written field: learned from the releases and the
        configuration (`table`), and the memos the object's class defines. A decrement
        or a write of unknown direction stales only memos (a bound stays a bound)."""
        key = (write.obj, write.field)
        got = self._derivations.get(key)
        if got is None:
            got = list(self.table.derived_from(write.field))
            cls = class_of(self.view, write.obj, self.aliases) if write.obj else None
            if cls is not None:
                # a field the class keeps as a snapshot of the written one (`orig_seq_lens =
                # seq_lens.clone()` in its factory) does not follow it, whatever the releases
                # show of other classes; the configuration still says what it says
                apart = snapshots_of(cls)
                if apart:
                    got = [d for d in got if d.kind == "configured" or not ({(d.field, write.field), (d.field, variant_of(write.field))} & apart)]
                got += [d for d in memos_of(cls) if write.field in d.sources or variant_of(write.field) in d.sources]
                # what this module's own constructors of the class show (`Meta(seq_lens=s,
                # total=int(s.sum()))`): the project's factories, read where the step is
                names = {c.name.rsplit(".", 1)[-1] for c in cls.classes()} if holds_layout(class_fields(cls)) else set()
                # ... and the constructors in the modules that define the class and its bases
                modules = [self.view.module] + [c.module for c in cls.classes() if c.module is not self.view.module]
                got += [
                    d for m in dict.fromkeys(modules) for d in module_derivations(m, names)
                    if d.owner in names and (write.field in d.sources or variant_of(write.field) in d.sources) and in_family(d)
                ]
                if names and write.sign == 1:
                    # ... and the fields the functions of those modules advance with it, in two
                    # functions at least (`md.kv_lens += 1; md.max_kv_len += 1`)
                    # (what follows the layout: a bound, a count, a shadow; two fields of the
                    # layout itself advanced together are both moved, neither follows)
                    fields = class_fields(cls)
                    got += [d for d in agreed(d for m in dict.fromkeys(modules) for d in module_advances(m, write.field))
                            if d.field in fields and not layout_state(d.field)]
            self._derivations[key] = got
        if write.sign == 1:
            return got
        return [d for d in got if d.exact]

    def reused_in_loop(self, write: FieldWrite, at: ast.AST) -> bool:
        """Whether a loop hands the object on after the write (or around it): the steps that
        rebuild from it read whatever a reader cached before the layout changed."""
        key = ("loop", write.obj, id(at))
        got = self._derivations.get(key)
        if got is None:
            line = getattr(at, "lineno", 0)
            got = False
            head = (write.obj or "").split(".", 1)[0]
            loops = [sub for sub in walk_local(self.func) if isinstance(sub, (ast.For, ast.AsyncFor, ast.While))]
            if any(sub.lineno <= line <= (sub.end_lineno or 0) and fresh_copy_each_pass(self.func, sub, head, self.aliases) for sub in loops):
                # a new copy, each pass, of an object this function built and never handed on:
                # nothing was cached on it before the write
                loops = []
            for sub in loops:
                if getattr(sub, "end_lineno", 0) < line:
                    continue
                for inner in ast.walk(sub):
                    if isinstance(inner, ast.Call) and last_name(inner.func) in _NOT_READERS:
                        continue  # `getattr(md, name)`, `len(md.x)`: nothing a memo is filled by
                    if isinstance(inner, ast.Call) and inner.lineno >= (line if sub.lineno > line else sub.lineno):
                        if any(canonical(ref(a), self.aliases) == write.obj for a in handed_on(inner)):
                            got = True
                            break
                if got:
                    break
            self._derivations[key] = got  # type: ignore[assignment]
        return bool(got)

    def filled_here(self, write: FieldWrite, ds: list[Derivation]) -> list[Derivation]:
        """The memos of `ds` this function fills on the written object before the write (a
        call of the method, a read of the property, that fills it), when it hands the object
        on or returns it after the write: what it handed on holds the memo of the old layout."""
        line = getattr(write.node, "lineno", 0)
        readers: set[str] = set()
        handed_after = False
        for sub in walk_local(self.func):
            if isinstance(sub, ast.Attribute) and getattr(sub, "lineno", line) < line:
                if canonical(ref(sub.value), self.aliases) == write.obj:
                    readers.add(sub.attr)
            elif isinstance(sub, ast.Call) and sub.lineno > line:
                if any(canonical(ref(a), self.aliases) == write.obj for a in handed_on(sub)):
                    handed_after = True
            elif isinstance(sub, ast.Return) and sub.value is not None and sub.lineno > line:
                if canonical(ref(sub.value), self.aliases) == write.obj:
                    handed_after = True
        if not handed_after:
            return []
        return [d for d in ds if d.exact and memo_reader(d) in readers]

    def evidence(self, write: FieldWrite, stale: list[str]) -> dict[str, Derivation]:
        out: dict[str, Derivation] = {}
        ds = self.derivations(write)
        # the derivation of the very field named first, then one of its backing store
        for d in ds:
            if d.field in stale and d.field not in out:
                out[d.field] = d
        for d in ds:
            for name in stale:
                if name not in out and variants(name) & variants(d.field):
                    out[name] = d
        return out

    def wanted(self, write: FieldWrite) -> list[str]:
        """The derived fields of the written field that the object is known to have."""
        obj = write.obj
        ds = self.derivations(write)
        if write.sign != 1 and ds and not self.reused_in_loop(write, write.node):
            # a layout changed outside any draft loop (a builder's own adjustment): the memo
            # matters to the readers of this object only where steps go on reusing it, or
            # where this function filled it before the write and hands the object on after
            ds = self.filled_here(write, ds)
        # memos first: a field and its backing store are named as the memo names it
        derived = list(dict.fromkeys(d.field for d in sorted(ds, key=lambda d: not d.exact)))
        if not derived:
            return []
        known = _known(self.view, self.func, obj, self.aliases)
        cls = class_of(self.view, obj, self.aliases)
        if cls is None:
            # a helper's parameter (or a copy of one): what its callers pass (also the bases'
            # calls of the method this one overrides)
            source = copied_from(obj, self.aliases)
            for site, passed, caliases in self._passed_by_callers(source) + self._passed_by_callers(source, inherited=True):
                if passed is None:
                    continue  # a value with no name there (`advance(self.make())`): nothing known of it
                caller = FunctionView(self.view.ctx, site.caller.module, site.node, site.caller.qual)
                known |= _known(caller, site.node, passed, caliases)
        own = _declared(cls) if cls is not None else set()
        declared = own | mentioned_fields(self.func, obj, self.aliases) if cls is not None else None
        exact = {d.field for d in self.derivations(write) if d.exact}
        # a memo is a cache of one class: it stales an object of that class (or a subclass),
        # or, where the object's class is unknown, one known to hold that very cache; a
        # runner's plain `seq_lens_cpu` buffer is not `CommonAttentionMetadata`'s memo
        owners = {c.name.rsplit(".", 1)[-1] for c in cls.classes()} if cls is not None else None
        # (a memo the releases show, of no named class, is the object's when it holds that
        # very field: a class's own `seq_lens_cpu` host copy is not `_seq_lens_cpu`'s cache)
        memo_ok = {
            d.field for d in ds if d.exact
            and (d.field in known if owners is None or d.owner is None else d.owner.rsplit(".", 1)[-1] in owners)
        }
        derived = [d for d in derived if d not in exact or d in memo_ok]
        source = filled_from(write, self.aliases)
        out = []
        for d in derived:
            hit = variants(d) & known
            if not hit or variants(d) & variants(write.field):
                continue
            if source is not None and variants(d) & variants(source):
                continue  # the field was just filled from this one: they hold the same values
            if declared is not None and not (variants(d) & declared):
                continue  # an attribute the class sets for itself (`self.x = ...`), not its data
            if d in exact and declared is not None and not (variants(d) & own):
                continue
            if any(variants(d) & variants(o) for o in out):
                continue  # a field and its backing store are one value: named once
            if d in exact and reset_by_users(self.view.project, d, self.view.module.path, self.func):
                continue  # the object's users clear this cache themselves, before it is read again
            out.append(d)
        return list(dict.fromkeys(out))

    def _passed_by_callers(self, obj: str, inherited: bool = False) -> list[tuple[Any, str | None, dict[str, str]]]:
        """(call site, the object it passes for `obj`, the caller's aliases), when `obj` is
        (a field of) a parameter of this function; `inherited`: the call sites in the bases
        that call the method this one overrides. The object is None where the caller passes
        nothing by that name (a call's result, a literal, no such argument)."""
        fn = self.view.info
        head, _, rest = obj.partition(".")
        if fn is None or head not in fn.facts.params or head in ("self", "cls"):
            return []
        if inherited:
            sites = inherited_callers(fn)
        else:
            if self._sites is None:
                self._sites = callers(self.view, fn)
            sites = self._sites
        index = fn.facts.params.index(head)
        out = []
        for site in sites:
            arg = call_argument(site.call, fn, index)
            caliases = local_aliases(site.node)
            passed = canonical(ref(arg), caliases) if arg is not None else None
            out.append((site, passed + ("." + rest if rest else "") if passed else None, caliases))
        return out

    # -- judging one advance ---------------------------------------------------------------------
    def stale(self, write: FieldWrite, at: ast.AST, wanted: list[str]) -> tuple[list[str], list[str]]:
        flow = self.flow
        resolve = lambda call: resolve_call(self.view, call)[1]  # noqa: E731
        if write.kind == "new":
            call = write.node
            given = {w.field for w in call_writes(call, self.aliases) if w.obj == write.obj and w.kind == "new"}
            copied = {w.field for w in call_writes(call, self.aliases) if w.obj == write.obj and w.kind == "copy"}
            if last_name(call.func) == "replace":
                # a `cached_property`'s value lives in the object's `__dict__`, which a copy made
                # through the constructor does not carry over
                cls = class_of(self.view, write.obj, self.aliases) if write.obj else None
                cached = cached_properties(cls) if cls is not None else set()
                stale = [d for d in wanted if not variants(d) & given and d not in cached]
            else:
                stale = [d for d in wanted if variants(d) & copied]
            if not stale:
                return [], []
            # the copy may be completed where it is bound
            stmt = statement_of(call, self.parent)
            result = None
            if isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1:
                result = ref(stmt.targets[0])
            if result is not None:
                bind = _bind_after(flow, stmt, result)
                if bind is not None:
                    stale = [d for d in stale if not covered(flow, bind, canonical(result, self.aliases) or result, d, self.aliases, resolve, self.summaries, forward_only=True)]
            if stale and _returned(self.func, call, result):
                return self._through_callers_copy(stale)
            return stale, []
        idx = _event(flow, write, at)
        if idx is None:
            return [], []
        memos = {d.field for d in self.derivations(write) if d.exact}
        stale = [d for d in wanted if not covered(flow, idx, write.obj, d, self.aliases, resolve, self.summaries,
                                                  filled_by_readers=bool(variants(d) & memos))]
        if stale:
            return self._through_callers_param(write.obj, stale)
        return stale, []

    def _where(self, site) -> str:
        """A caller as the message names it: `qual` (path:line of the call)."""
        module = site.caller.module
        return f"`{site.caller.qual}` at {module.project.display(module.path)}:{site.call.lineno}"

    def _through_callers_param(self, obj: str, stale: list[str]) -> tuple[list[str], list[str]]:
        sites = self._passed_by_callers(obj)
        if not sites:
            return stale, []
        still: list[str] = []
        via: list[str] = []
        for d in stale:
            for site, passed, caliases in sites:
                if not self._covered_at(site, passed, caliases, d, self.depth):
                    still.append(d)
                    via.append(self._where(site))
                    break
        return still, sorted(set(via))

    def _covered_at(self, site, passed: str | None, caliases: dict[str, str], field: str, depth: int) -> bool:
        """Whether the caller updates `field` on the object around the call, or, when the
        object is its own parameter, every one of its callers does around their call (the step
        goes on up: `set_dummy_context` in a helper whose caller recomputes the lengths)."""
        cflow = FieldFlow(site.node)
        cidx = cflow.by_call.get(id(site.call))
        if passed is None or cidx is None:
            return False
        resolve = resolver_for(self.summaries, site.caller)
        if covered(cflow, cidx, passed, field, caliases, resolve, self.summaries):
            return True
        head, _, rest = passed.partition(".")
        fn = site.caller
        if depth <= 0 or head not in fn.facts.params or head in ("self", "cls"):
            return False
        view = FunctionView(self.view.ctx, fn.module, site.node, fn.qual)
        ups = callers(view, fn)
        if not ups:
            return False
        index = fn.facts.params.index(head)
        for up in ups:
            arg = call_argument(up.call, fn, index)
            ualiases = local_aliases(up.node)
            upassed = canonical(ref(arg), ualiases) if arg is not None else None
            if upassed is not None and rest:
                upassed += "." + rest
            if not self._covered_at(up, upassed, ualiases, field, depth - 1):
                return False
        return True

    def _through_callers_copy(self, stale: list[str]) -> tuple[list[str], list[str]]:
        fn = self.view.info
        if fn is None:
            return stale, []
        if self._sites is None:
            self._sites = callers(self.view, fn)
        sites = self._sites
        if not sites:
            return stale, []
        still: list[str] = []
        via: list[str] = []
        for d in stale:
            for site in sites:
                cparent = parents(site.node)
                stmt = statement_of(site.call, cparent)
                caliases = local_aliases(site.node)
                ok = False
                if isinstance(stmt, ast.Assign) and stmt.value is site.call and len(stmt.targets) == 1:
                    result = ref(stmt.targets[0])
                    cflow = FieldFlow(site.node)
                    bind = _bind_after(cflow, stmt, result) if result else None
                    if bind is not None:
                        ok = covered(cflow, bind, canonical(result, caliases) or result, d, caliases,
                                      resolver_for(self.summaries, site.caller), self.summaries, forward_only=True)
                if not ok:
                    still.append(d)
                    via.append(self._where(site))
                    break
        return still, sorted(set(via))


def reset_by_users(project, memo: str, path=None, func: ast.AST | None = None) -> bool:
    """Some code of the project outside the memo's own class resets it on an object it holds
    (`model_input.attn_metadata._cached_decode_metadata = None` in a worker, before the next
    step's forward): the cache is managed by the object's users, and a step that moves the
    fields it was filled from relies on that reset rather than making its own. A reset in
    `func` itself (of the module at `path`) is that step's own: judged where it stands."""
    table = project.__dict__.setdefault("_memo_resets", {})
    sites = project.tracker.memo(table, memo, lambda: _reset_sites(project, memo))
    if func is None:
        return bool(sites)
    first, last = func.lineno, getattr(func, "end_lineno", func.lineno)
    return any(not (where == str(path) and first <= line <= last) for where, line in sites)


def _reset_sites(project, memo: str) -> tuple[tuple[str, int], ...]:
    from .needs import Words

    out = []
    for path in project.files_containing(memo):
        module = project.module_at(path)
        for chunk in module.leaf_chunks(Words(memo)):
            try:
                own, extra = module.statements(chunk)
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                continue
            for stmt in list(own) + list(extra):
                for sub in ast.walk(stmt):
                    if not (isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Constant) and sub.value.value is None):
                        continue
                    for t in sub.targets:
                        if isinstance(t, ast.Attribute) and t.attr == memo and not (isinstance(t.value, ast.Name) and t.value.id in ("self", "cls")):
                            out.append((str(path), sub.lineno))
    return tuple(out)


def _declared(cls) -> set[str]:
    """The data fields a class and its bases declare: what a metadata object carries from
    step to step (see `fields.declared_data`)."""
    return declared_data(cls)


def _known(view: FunctionView, func: ast.AST, obj: str, aliases: dict[str, str]) -> set[str]:
    """Fields `obj` is known to have: its class's, and those the function touches on it."""
    known = set(mentioned_fields(func, obj, aliases))
    cls = class_of(view, obj, aliases)
    if cls is not None:
        known |= class_fields(cls)
    return known


def _event(flow: FieldFlow, write: FieldWrite, at: ast.AST) -> int | None:
    if isinstance(at, ast.Call):
        return flow.by_call.get(id(at))
    for idx, target in flow.targets.items():
        if target is at:
            return idx
    return None


def _bind_after(flow: FieldFlow, stmt: ast.stmt, name: str | None) -> int | None:
    """The event that binds `name` (a name, or an attribute store) by `stmt`."""
    for node in flow.nodes:
        if node.node is stmt and node.kind in ("bind", "store") and node.name == name:
            return node.index
    return None


def _returned(func: ast.AST, call: ast.Call, result: str | None) -> bool:
    for sub in walk_local(func):
        if isinstance(sub, ast.Return) and sub.value is not None:
            if sub.value is call or (result is not None and ref(sub.value) == result):
                return True
            if isinstance(sub.value, ast.Tuple) and any(e is call or (result and ref(e) == result) for e in sub.value.elts):
                return True
    return False


__all__ = [
    "DraftStep",
    "StaleWrites",
    "advances",
    "increment_need",
    "learned_table",
    "may_write_a_source",
    "source_write",
    "spells_write",
    "stale_derived",
    "written_through_calls",
    "writes_only_by_syntax",
]
