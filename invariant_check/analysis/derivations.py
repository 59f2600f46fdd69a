"""Derived state as the code defines it: which fields of a metadata object are computed from
which other fields, learned from the code, with the line that shows it.

Three kinds of evidence, each read from source, never from a list:

- `memo`: a method of the class fills `self._x` from other fields and returns it once set
  (`if self._x is None: self._x = self.seq_lens - q; return self._x`). The memo is exact:
  any write of a field it was filled from (an advance, a decrement, a new layout) leaves it
  stale until it is set to None or filled again. A property that caches into its backing
  field (`seq_lens_cpu` / `_seq_lens_cpu`) is such a memo.
- `built`: a constructor, a factory or a `replace(...)` sets one keyword from an expression of
  the value it gives another (`seq_lens=s, max_seq_len=int(s.max())`,
  `dcp_local_seq_lens=get_dcp_local_seq_lens(s, ...)` with `seq_lens=s`), directly or through
  locals bound once; or a statement sets `x.a` from `x.b` (`md.max_seq_len = int(md.seq_lens.max())`).
- `advanced-with`: one draft step advances `x.b` and then `x.a` by the same spelled amount
  (`seq_lens += 1` ... `seq_lens_cpu_upper_bound += 1`), or one `replace(...)` does.

A `built` or `advanced-with` field is kept as a bound by the code that maintains it: it goes
stale when its source advances, not when it shrinks (a decrement leaves `max_seq_len` a valid
upper bound). A memo goes stale on any write of a source.

`learn(text)` reads one module's text (pure, for the generator and the cache); `memos(info)`
reads one class; `table(project)` joins what the bundled models learned from the releases
(`models/DERIVATIONS.json`), the project's modules and the configuration.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator

from ..globs import name_matcher
from .facts import child_nodes, last_name, ref, walk_local

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)

# The family's classes: those that hold a batch's token layout, the state every draft step
# moves (sequence, context, KV-cache, history or prefix lengths in any spelling, query
# offsets, positions, slots, block tables). What is derived from those fields is learned; a
# class without any (a tool call, a config, a counter) keeps no attention metadata, however
# its constructors compute keywords. Globs, so that the prefilter's literals and patterns are
# derived from the same list (`stale_derived.increment_need`).
_LENGTHS = ("seq", "sequence", "context", "ctx", "kv", "cache", "history", "prefix")
LAYOUT_GLOBS: tuple[str, ...] = (
    *(f"*{w}{sep}len*" for w in _LENGTHS for sep in ("_", "")),
    "*query_start_loc*", "*query_lens*", "positions", "*_positions", "*slot_mapping*", "*block_table", "*block_tables",
)
_LAYOUT_MATCH = name_matcher(LAYOUT_GLOBS, case_sensitive=True)
# The lengths of the layout no release names (the releases' `seq_lens`, `query_start_loc`,
# `positions`, ... are in the learned table by name): a draft step that moves one is judged
# by what the object's class derives from it, learned where the class is read.
STEP_GLOBS: tuple[str, ...] = (
    *(f"*{w}_len*" for w in _LENGTHS if w != "seq"),
    # the sequence lengths under another name (`seq_lens_tensor`, `seq_len_tensor`,
    # `decode_seq_lens`); not `*seq_len*`, which is every bound of them (`max_seq_len`) as
    # well, nor a request's own `seq_length`
    "seq_lens?*", "seq_len_*", "*_seq_lens",
    # ... and spelled in one word (lmdeploy's `kv_seqlens`, `kv_seqlen`); not the offsets
    # computed from them (`cu_seqlens_k`, see `step_field`)
    "*_seqlens", "*_seqlen",
)
# what a step field is not, however it is spelled: an aggregate of the lengths
# (`seq_lens_sum`), which follows them
_AGGREGATES = ("_sum", "_total", "_count")
_STEP_MATCH = name_matcher(STEP_GLOBS, case_sensitive=True)


def layout_field(name: str) -> bool:
    """Whether a field is one of a batch's token layout (`LAYOUT_GLOBS`)."""
    return _LAYOUT_MATCH(name)


def step_field(name: str) -> bool:
    """Whether a field is a length of the layout by its spelling (`STEP_GLOBS`: `kv_lens`,
    `context_lens`, `ctx_lens`, `cache_lens`, `history_lengths`, ...): a step that moves it may leave what a
    class derives from it behind, whatever the class calls the derived field. Not an
    aggregate of them (`seq_lens_sum`), nor the offsets or bounds computed from them
    (`cu_seqlens_k`, `max_kv_seqlen`)."""
    return _STEP_MATCH(name) and not name.endswith(_AGGREGATES) and not name.startswith(("cu_", "max_", "min_"))


def layout_state(name: str) -> bool:
    """A field of the layout a draft step moves (`positions`, `seq_lens`, `kv_lens`), not a
    value kept beside it to follow it: a bound (`max_seq_len`, `num_*`, `*_upper_bound`), a
    host shadow (`*_cpu`) or a private backing store (`_seq_lens_cpu`)."""
    return layout_field(name) and not name.startswith(("_", "max_", "min_", "num_")) and not name.endswith(("_cpu", "_bound"))


def holds_layout(fields: Iterable[str]) -> bool:
    """Whether a class with these data fields is one of the family's (see `LAYOUT_GLOBS`)."""
    return any(layout_field(f) for f in fields)


def in_family(d: "Derivation") -> bool:
    """A derivation a draft step can leave stale: a memo (any write of its sources stales
    it), one the configuration names, or a value computed from the layout itself (a maximum
    of `seq_lens`, offsets from `query_start_loc`); not a value of the model's shape or the
    engine's settings that a constructor happens to compute beside it."""
    return d.exact or d.kind == "configured" or holds_layout(d.sources)

KINDS = ("memo", "built", "advanced-with", "configured")


@dataclass(frozen=True)
class Derivation:
    """`field` is computed from `sources` (`kind`, shown at `where`: `path:line`, by `how`)."""

    field: str
    sources: tuple[str, ...]
    kind: str
    where: str
    how: str
    owner: str | None = None  # the class, where the evidence names one
    function: str = ""  # the function the evidence sits in
    lead: bool = False  # advanced-with: the source was advanced first

    @property
    def exact(self) -> bool:
        """A memo returns the value it was filled with: any write of a source stales it."""
        return self.kind == "memo"

    def to_json(self) -> dict:
        out = {"field": self.field, "sources": list(self.sources), "kind": self.kind, "where": self.where, "how": self.how}
        if self.owner:
            out["owner"] = self.owner
        if self.function:
            out["function"] = self.function
        if self.lead:
            out["lead"] = True
        return out

    @classmethod
    def from_json(cls, raw: dict) -> "Derivation":
        return cls(raw["field"], tuple(raw["sources"]), raw["kind"], raw["where"], raw["how"], raw.get("owner"), raw.get("function", ""), raw.get("lead", False))


# -- memos: one class's methods ----------------------------------------------------------------


def class_memos(node: ast.ClassDef, data_fields: Iterable[str], where: str, owner: str | None = None) -> list[Derivation]:
    """Memos of a class: a method that tests `self._x` (against None, or for truth), fills it
    from other data fields and returns it. `data_fields`: the class's data (dataclass fields,
    attributes its methods set), `where`: the file as it should be shown."""
    fields = set(data_fields)
    out: list[Derivation] = []
    for item in node.body:
        if isinstance(item, FUNCS):
            out.extend(method_memos(item, fields, where, owner or node.name))
    return out


def is_cached_property(fn: ast.AST) -> bool:
    """A method decorated `@cached_property` (`functools.cached_property`)."""
    return any(last_name(d) == "cached_property" for d in getattr(fn, "decorator_list", ()))


def method_memos(item: ast.AST, fields: set[str], where: str, owner: str | None) -> list[Derivation]:
    if not item.args.args:
        return []
    me = item.args.args[0].arg
    if is_cached_property(item):
        # `@cached_property def req_of_token(self)`: computed on the first read, then kept
        # on the object under the method's own name
        sources = sorted(a for a in _read_self_attrs(item, me) if a != item.name and a in fields)
        if not sources:
            return []
        how = f"`@cached_property` `{item.name}` keeps what its first read computes"
        return [Derivation(item.name, tuple(sources), "memo", f"{where}:{item.lineno}", how, owner, item.name)]
    filled = _filled_self_attrs(item, me)
    if not filled:
        return []
    tested = _tested_self_attrs(item, me)
    read = _read_self_attrs(item, me)
    returned = _returned_self_attrs(item, me)
    out = []
    for attr, line in filled.items():
        if attr not in tested or attr not in returned:
            continue
        sources = sorted(a for a in read if a != attr and a in fields and a not in filled)
        if not sources:
            continue
        prop = any(last_name(d) == "property" for d in item.decorator_list)
        how = (f"property `{item.name}` caches it" if prop else f"`{item.name}()` fills it") + " and returns it once set"
        out.append(Derivation(attr, tuple(sources), "memo", f"{where}:{line}", how, owner, item.name))
    return out


_READER = re.compile(r"(?:property `(\w+)` caches it|`(\w+)\(\)` fills it|`@cached_property` `(\w+)`)")


def memo_reader(d: Derivation) -> str | None:
    """The method (or property) whose call fills a memo: the evidence's function, or, for
    the bundled table (which keeps only the text), the name `method_memos` wrote into `how`."""
    if d.kind != "memo":
        return None
    if d.function:
        return d.function.rsplit(".", 1)[-1]
    m = _READER.search(d.how)
    return next((g for g in m.groups() if g), None) if m else None


def module_derivations(module, class_names: Iterable[str]) -> list[Derivation]:
    """The derivations a module of the project model shows through its constructors of the
    named classes (`Meta(seq_lens=s, total=int(s.sum()))`), learned once per module and class
    name. Only the definitions that spell the name are read, through the module's own parsed
    chunks (the ones the rules share): the module is never parsed again whole."""
    cache = module.__dict__.setdefault("_derivations", {})
    out: list[Derivation] = []
    for name in class_names:
        got = cache.get(name)
        if got is None:
            got = []
            if name + "(" in module.source.text:
                where = module.project.display(module.path)
                for fn in _functions_spelling(module, name):
                    values = None
                    for sub in walk_local(fn):
                        if isinstance(sub, ast.Call) and last_name(sub.func) == name and len(sub.keywords) >= 2:
                            if values is None:
                                values = _single_bindings(fn)
                            got.extend(_keyword_derivations(sub, values, where, fn.name))
            cache[name] = got
        out.extend(got)
    return out


def module_advances(module, field: str) -> list[Derivation]:
    """The fields the functions of a module of the project model advance together with
    `field`, by the same amount (`md.kv_lens += 1; md.max_kv_len += 1`): `advanced-with`
    derivations, one per function, learned once per module and field from the chunks that
    spell the field (as `module_derivations`)."""
    cache = module.__dict__.setdefault("_advances", {})
    got = cache.get(field)
    if got is None:
        got = []
        if field in module.source.text:
            where = module.project.display(module.path)
            for fn in _functions_spelling(module, field):
                got.extend(d for d in _advanced_together(fn, where, fn.name) if field in d.sources)
        cache[field] = got
    return got


def _functions_spelling(module, word: str) -> Iterator[ast.AST]:
    """Each function of the module's parsed chunks that spell `word`, once."""
    from .needs import Words

    seen: set[int] = set()
    for chunk in module.leaf_chunks(Words(word)):
        try:
            own, extra = module.statements(chunk)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            continue
        for fn in _functions(ast.Module(body=list(own) + list(extra), type_ignores=[])):
            if id(fn) not in seen:
                seen.add(id(fn))
                yield fn


def agreed(derivations: Iterable[Derivation], functions: int = 2) -> list[Derivation]:
    """The `advanced-with` evidence shown by at least `functions` different functions (one
    that happens to advance two fields together is not yet the code's rule), one per pair."""
    by_pair: dict[tuple[str, tuple[str, ...]], list[Derivation]] = {}
    for d in derivations:
        by_pair.setdefault((d.field, d.sources), []).append(d)
    out = []
    for ds in by_pair.values():
        if len({(d.where.rsplit(":", 1)[0], d.function) for d in ds}) >= functions:
            out.append(ds[0])
    return out


def _functions(tree: ast.AST) -> Iterator[ast.AST]:
    """Every function of a module, found through statements only (a function is one; the
    expressions, most of a module's nodes, are never entered)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, FUNCS):
            yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, name, None)
            if isinstance(block, list):
                stack.extend(b for b in block if isinstance(b, (ast.stmt, ast.excepthandler, ast.match_case)))


def memos_of(info) -> list[Derivation]:
    """What a class of the project model (and its resolved bases) derives in its own methods:
    its memos, and fields its methods set from other fields (`self.slot_mapping =
    f(self.positions)` in `__post_init__`). Memoised."""
    return info.project.tracker.memo(info._memo, "memos", lambda: _memos_of(info))


def _memos_of(info) -> list[Derivation]:
    from .fields import class_fields, declared_data

    fields = class_fields(info)
    declared = declared_data(info)
    out: list[Derivation] = []
    if not holds_layout(fields):
        return out
    order: list[str] | None = None
    for cls in info.classes():
        where = cls.module.project.display(cls.module.path)
        for name in cls.facts.methods:
            fn = cls.module.function(f"{cls.qual}.{name}")
            node = fn.node() if fn is not None else None
            if node is not None:
                # a memo the object carries: a declared field (a dataclass's), not an
                # attribute some service object caches for itself
                out.extend(d for d in method_memos(node, fields, where, cls.name) if d.field in declared)
                me = node.args.args[0].arg if node.args.args else None
                values = None
                kept = _kept_parameters(node, me)
                for sub in walk_local(node):
                    if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and me is not None and ref(getattr(sub.targets[0], "value", None)) == me:
                        if isinstance(sub.value, ast.Name) and values is None:
                            values = _single_bindings(node)  # `self.kv_indptr = indptr`
                        for d in _assigned_derivation(sub, where, f"{cls.name}.{name}", kept, values):
                            if d.field in fields and set(d.sources) & fields and in_family(d):
                                out.append(d)
                    elif isinstance(sub, ast.Call) and len(sub.keywords) + len(sub.args) >= 2 and _makes_own(sub, cls.name, me):
                        # the class's own factory (`cls(kv_lens=l, max_kv_len=int(l.max()))`,
                        # `replace(self, ...)`): what it computes is the class's derivation;
                        # positional arguments are its fields in order
                        values = _single_bindings(node) if values is None else values
                        call = _by_keyword(sub, order if order is not None else (order := init_order(info)))
                        for d in _keyword_derivations(call, values, where, f"{cls.name}.{name}"):
                            if d.field in fields and in_family(d):
                                out.append(Derivation(d.field, d.sources, d.kind, d.where, d.how, cls.name, d.function))
    return out


def snapshots_of(info) -> frozenset[tuple[str, str]]:
    """(field, source) for each field a class's own code keeps as a snapshot of another of
    its fields: a field named as one (`orig_*`, `prev_*`, ...) that its factories or the
    constructors of its module set to a copy of the value another keyword hands over
    (`cls(seq_lens=s, orig_seq_lens=s.clone())`), or that a method sets to a copy of a
    parameter it keeps in that field (`self.seq_lens = seq_lens; self.orig_seq_lens =
    seq_lens.clone()`). The class says the field holds the values from before the step, so
    evidence from other classes that it follows the source does not hold for it.
    Memoised."""
    return info.project.tracker.memo(info._memo, "snapshots", lambda: frozenset(_snapshots_of(info)))


def _snapshots_of(info) -> Iterator[tuple[str, str]]:
    for cls in info.classes():
        # no snapshot-named field spelled as a keyword or target: nothing to parse for
        text = cls.module.source.text
        if _SNAPSHOT_SPELLED.search(text) is None:
            continue
        chunks = cls.module.class_chunks(cls.qual)
        methods = cls.facts.methods if any(_SNAPSHOT_SPELLED.search(text, c.start, c.end) for c in chunks) else ()
        for name in methods:
            fn = cls.module.function(f"{cls.qual}.{name}")
            node = fn.node() if fn is not None else None
            if node is None:
                continue
            me = node.args.args[0].arg if node.args.args else None
            kept = _kept_parameters(node, me)
            for sub in walk_local(node):
                if isinstance(sub, ast.Call) and sub.keywords and _makes_own(sub, cls.name, me):
                    yield from _snapshot_keywords(sub)
                elif isinstance(sub, ast.Assign) and len(sub.targets) == 1 and kept:
                    target = sub.targets[0]
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == me and _snapshot_name(target.attr):
                        root = _root(sub.value)
                        if root in kept and not _same_tensor(sub.value):
                            yield target.attr, kept[root]
        for fn in _functions_spelling(cls.module, cls.name):
            for sub in walk_local(fn):
                if isinstance(sub, ast.Call) and sub.keywords and last_name(sub.func) == cls.name:
                    yield from _snapshot_keywords(sub)


def _snapshot_name(field: str) -> bool:
    return field.lstrip("_").startswith(_SNAPSHOT)


def _snapshot_keywords(call: ast.Call) -> Iterator[tuple[str, str]]:
    keywords = [k for k in call.keywords if k.arg]
    roots = {k.arg: _root(k.value) for k in keywords}
    for kw in keywords:
        if not _snapshot_name(kw.arg) or roots[kw.arg] is None or _same_tensor(kw.value):
            continue
        for other in keywords:
            if other is not kw and roots[other.arg] == roots[kw.arg] and _same_tensor(other.value):
                yield kw.arg, other.arg


def _kept_parameters(fn: ast.AST, me: str | None) -> dict[str, str]:
    """Parameters a method stores on the object unchanged (`self.seq_lens = seq_lens`), with
    the field each is kept in: what it computes from one it computes from that field."""
    if me is None:
        return {}
    params = {a.arg for a in fn.args.args[1:] + fn.args.kwonlyargs}
    out: dict[str, str] = {}
    for sub in walk_local(fn):
        if isinstance(sub, (ast.Assign, ast.AnnAssign)) and isinstance(sub.value, ast.Name) and sub.value.id in params:
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me:
                    out.setdefault(sub.value.id, t.attr)
    return out


def init_order(info) -> list[str]:
    """The names a call of the class takes by position: its `__init__`'s parameters, else a
    dataclass's fields in the order the class body (and its bases, first) declares them."""
    init = info.method("__init__")
    if init is not None and init.facts.params:
        return list(init.facts.params[1:])
    out: list[str] = []
    for cls in reversed(info.classes()):
        out.extend(f for f in cls.facts.fields if f not in out)
    return out


def _by_keyword(call: ast.Call, order: list[str]) -> ast.Call:
    """`call` with its positional arguments given as keywords of the names in `order`."""
    if not call.args or last_name(call.func) == "replace" or any(isinstance(a, ast.Starred) for a in call.args):
        return call
    given = {k.arg for k in call.keywords}
    extra = [ast.keyword(arg=n, value=a) for n, a in zip(order, call.args) if n not in given]
    return ast.Call(func=call.func, args=[], keywords=extra + list(call.keywords))


def _makes_own(call: ast.Call, name: str, me: str | None) -> bool:
    """A call in a method of class `name` that makes an object of it: `cls(...)`,
    `Name(...)`, `type(self)(...)`, `replace(self, ...)`."""
    func = call.func
    if isinstance(func, ast.Call) and last_name(func.func) == "type":
        return True
    spelled = last_name(func) or ""
    if spelled == "replace":
        return bool(call.args) and me is not None and isinstance(call.args[0], ast.Name) and call.args[0].id == me
    return spelled == name or (spelled == "cls" and me == "cls")


def _filled_self_attrs(fn: ast.AST, me: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for sub in walk_local(fn):
        if isinstance(sub, (ast.Assign, ast.AnnAssign)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            value = sub.value
            if value is None or (isinstance(value, ast.Constant) and value.value is None):
                continue  # an invalidation, not a fill
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me:
                    out.setdefault(t.attr, sub.lineno)
    return out


def _tested_self_attrs(fn: ast.AST, me: str) -> set[str]:
    """Attributes tested for being set: `self._x is None`, `self._x is not None`, `not self._x`, `self._x`."""
    out: set[str] = set()

    def own(expr: ast.AST) -> str | None:
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == me:
            return expr.attr
        return None

    for sub in walk_local(fn):
        if not isinstance(sub, (ast.If, ast.IfExp)):
            continue
        test = sub.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test = test.operand
        name = own(test)
        if name is None and isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)):
            right = test.comparators[0]
            if isinstance(right, ast.Constant) and right.value is None:
                name = own(test.left)
        if name is not None:
            out.add(name)
    return out


def _read_self_attrs(fn: ast.AST, me: str) -> set[str]:
    return {
        sub.attr
        for sub in walk_local(fn)
        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load) and isinstance(sub.value, ast.Name) and sub.value.id == me
    }


def _returned_self_attrs(fn: ast.AST, me: str) -> set[str]:
    out: set[str] = set()
    for sub in walk_local(fn):
        if isinstance(sub, ast.Return) and sub.value is not None:
            value = sub.value.value if isinstance(sub.value, ast.Subscript) else sub.value
            if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == me:
                out.add(value.attr)
    return out


# -- built and advanced-with: any module's functions ------------------------------------------------


def learn(text: str, where: str) -> list[Derivation]:
    """Every `built` and `advanced-with` derivation the module's functions show, and the memos
    of its classes (their data fields as the class body and its methods spell them)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    return list(learn_tree(tree, where))


def project_only(d: Derivation) -> bool:
    """Evidence learned for the linted project's classes but not put in the bundled table: a
    copy on another device (vLLM's host shadows are its `_seq_lens_cpu` memo and the variant
    spellings, and its device layout copied from the host, `query_start_loc=
    query_start_loc_cpu.to(device)`, would make the layout a field derived from its shadow),
    and a `cached_property` (FlexAttention's reads `max_seq_len`, a bound, and would make a
    bound's catch-up look like a move of the layout)."""
    return " to a copy of " in d.how or d.how.startswith("`@cached_property`")


def learn_tree(tree: ast.AST, where: str, project: bool = True) -> Iterator[Derivation]:
    """What a module shows, as IC004 learns it for the linted project's classes; with
    `project=False`, what goes into the bundled table (see `project_only`)."""
    for node in ast.walk(tree):
        if isinstance(node, FUNCS):
            ds = function_derivations(node, where, project)
        elif isinstance(node, ast.ClassDef):
            declared = declared_fields(node) | (init_data(node) if project else set())
            ds = (d for d in class_memos(node, own_data_fields(node), where) if d.field in declared)
        else:
            continue
        yield from (d for d in ds if project or not project_only(d))


def init_data(node: ast.ClassDef) -> set[str]:
    """The attributes a plain class's `__init__` sets on `self` when it keeps a layout field
    handed to it under its own name (`self.seq_lens = seq_lens`): its data (as
    `fields.declared_data` reads the project model)."""
    init = next((item for item in node.body if isinstance(item, FUNCS) and item.name == "__init__"), None)
    if init is None or not init.args.args:
        return set()
    me = init.args.args[0].arg
    kept = _kept_parameters(init, me)
    if not any(field == param and layout_field(field) and not field.startswith(("max_", "min_", "num_")) for param, field in kept.items()):
        return set()
    return {t.attr for sub in walk_local(init) if isinstance(sub, (ast.Assign, ast.AnnAssign))
            for t in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me}


def declared_fields(node: ast.ClassDef) -> set[str]:
    """The names a class body declares with an annotation (a dataclass's fields), and its
    `cached_property`s (kept on the object once read)."""
    return {item.target.id for item in node.body if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)} | {
        item.name for item in node.body if isinstance(item, FUNCS) and is_cached_property(item)
    }


def own_data_fields(node: ast.ClassDef) -> set[str]:
    """The data a class body spells: annotated names, plain bindings, `self.x = ...` in its methods."""
    out: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            out.add(item.target.id)
        elif isinstance(item, ast.Assign):
            out.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, FUNCS) and item.args.args:
            if is_cached_property(item):
                out.add(item.name)  # kept on the object once read
            me = item.args.args[0].arg
            for sub in walk_local(item):
                if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                    out.update(t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me)
    return out


def function_derivations(fn: ast.AST, where: str, project: bool = True) -> Iterator[Derivation]:
    values = _single_bindings(fn)
    qual = getattr(fn, "name", "")
    # a value computed from a parameter the function keeps on the object (`self.seq_lens =
    # seq_lens; self.max_seq_len = int(seq_lens.max())`): read where the project's classes are
    kept = _kept_parameters(fn, fn.args.args[0].arg) if project and fn.args.args else None
    for sub in walk_local(fn):
        if isinstance(sub, ast.Call) and len(sub.keywords) >= 2 and _builds(sub):
            yield from _keyword_derivations(sub, values, where, qual)
        elif isinstance(sub, ast.Assign) and len(sub.targets) == 1:
            yield from _assigned_derivation(sub, where, qual, kept)
    yield from _advanced_together(fn, where, qual)


def _builds(call: ast.Call) -> bool:
    """A call that makes an object from its keywords: a class (`Cls(...)`, `cls(...)`), a
    copy (`replace(...)`) or a factory of metadata (`build_attn_metadata(...)`). A kernel or
    a forward given several tensors by keyword is not one."""
    name = last_name(call.func) or ""
    return name[:1].isupper() or name in ("cls", "replace") or "metadata" in name.lower()


def _single_bindings(fn: ast.AST) -> dict[str, ast.AST]:
    """Local names bound exactly once by a plain assignment (parameters count as a binding),
    with their value."""
    count: dict[str, int] = {}
    value: dict[str, ast.AST] = {}
    args = getattr(fn, "args", None)
    if args is not None:
        for a in args.posonlyargs + args.args + args.kwonlyargs + [x for x in (args.vararg, args.kwarg) if x]:
            count[a.arg] = 1
    for sub in walk_local(fn):
        if isinstance(sub, ast.Assign):
            for t in sub.targets:
                if isinstance(t, ast.Name):
                    count[t.id] = count.get(t.id, 0) + 1
                    value[t.id] = sub.value
                elif isinstance(t, (ast.Tuple, ast.List)):
                    for e in ast.walk(t):
                        if isinstance(e, ast.Name):
                            count[e.id] = count.get(e.id, 0) + 2
        elif isinstance(sub, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
            for e in ast.walk(sub.target):
                if isinstance(e, ast.Name):
                    count[e.id] = count.get(e.id, 0) + 2
        elif isinstance(sub, ast.withitem) and sub.optional_vars is not None:
            for e in ast.walk(sub.optional_vars):
                if isinstance(e, ast.Name):
                    count[e.id] = count.get(e.id, 0) + 2
    out = {k: v for k, v in value.items() if count.get(k) == 1}
    # a local allocated, then filled in place (`cu = torch.zeros(n + 1); cu[1:] =
    # torch.cumsum(seq_lens, 0)`): its values are what the fills store
    for sub in walk_local(fn):
        if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Subscript):
            holder = sub.targets[0].value
            if isinstance(holder, ast.Name) and holder.id in out:
                out[holder.id] = ast.Tuple(elts=[out[holder.id], sub.value], ctx=ast.Load())
    return out


# methods that hand the same values on (a view, a copy to another device or dtype)
_VIEWS = frozenset({"to", "contiguous", "view", "reshape", "clone", "int", "long", "flatten", "squeeze", "unsqueeze", "detach", "cpu", "cuda", "pin_memory"})
# what reads a tensor's shape, place or type, not its values
_SHAPE = frozenset({"len", "shape", "size", "numel", "dim", "ndim", "device", "dtype", "stride", "is_cuda", "data_ptr"})
# calls that compute one value from all of a field's values (`max(ctx_lens)`,
# `torch.sum(kv_lens)`): a derived value, not the value handed over
_REDUCE = frozenset({"max", "min", "sum", "prod", "mean", "amax", "amin", "cumsum", "cumprod", "count_nonzero"})
# calls that allocate from a size: their arguments are shapes
_ALLOC = frozenset({"zeros", "empty", "ones", "full", "arange", "zeros_like", "empty_like", "ones_like", "full_like", "_make_buffer", "make_buffer"})


def _transferred(expr: ast.AST) -> bool:
    """`x.cpu()`, `x.to("cpu")`, `x.to(device, non_blocking=True)`, `x.pin_memory()`:
    the values of `x` in a tensor of their own on another device, which an in-place advance of
    `x` does not reach."""
    for _ in range(4):
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _VIEWS:
            method = expr.func.attr
            if method in _TRANSFERS:
                return True
            if method == "to" and _to_a_device(expr):
                return True
            expr = expr.func.value
        else:
            break
    return False


# methods that put a tensor's values on another device (`to` only with a device: see
# `_to_a_device`; a dtype conversion of the same dtype returns the tensor itself). Not
# `clone()`: a copy on the same device is a snapshot kept on purpose (`orig_seq_lens`)
_TRANSFERS = frozenset({"cpu", "cuda", "pin_memory"})
# ... and the names of a snapshot, on any device: the values before the step, not a shadow
_SNAPSHOT = ("orig", "prev", "old", "init", "saved", "original")
# a field named as a snapshot (`_SNAPSHOT`, after leading underscores) bound by keyword or
# assignment: the text every snapshot `_snapshots_of` reads must hold
_SNAPSHOT_SPELLED = re.compile(r"(?<![\w])_*(?:%s)\w*\s*=(?!=)" % "|".join(_SNAPSHOT))


def _same_tensor(expr: ast.AST) -> bool:
    """The tensor itself or rows of it (`kv`, `self.buf.kv[:n]`), not a copy of it."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    return isinstance(expr, (ast.Name, ast.Attribute))


def _to_a_device(call: ast.Call) -> bool:
    if any(k.arg in ("device", "non_blocking") for k in call.keywords):
        return True
    for arg in call.args[:1]:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value.split(":")[0] in ("cpu", "cuda", "xpu", "npu", "hpu")
        spelled = ref(arg) or ""
        # `x.to(device)`, `x.to(self.dev)`; not a dtype (`x.to(torch.int32)`, `x.to(dtype)`)
        return bool(spelled) and not spelled.startswith(("torch.", "np.")) and "dtype" not in spelled.rsplit(".", 1)[-1]
    return False


def _root(expr: ast.AST) -> str | None:
    """The value a keyword hands over, as a dotted name, past slicing, conversions and a
    transfer of one argument (`self.input_buffers.seq_lens[:n]`, `seq_lens.to(device)`,
    `async_tensor_h2d(seq_lens_cpu, device)`): None for anything computed."""
    for _ in range(4):
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _VIEWS:
            expr = expr.func.value
        elif isinstance(expr, ast.Call) and len(expr.args) == 1 and isinstance(expr.args[0], (ast.Name, ast.Attribute, ast.Subscript)) and last_name(expr.func) not in _SHAPE | _ALLOC | _REDUCE:
            expr = expr.args[0]
        else:
            break
    return ref(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else None


def _value_parts(expr: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `expr` that carry values: not slice indices (rows chosen, not computed),
    not shapes, places or types, not the sizes given to an allocation."""
    stack = [expr]
    while stack:
        cur = stack.pop()
        if isinstance(cur, ast.Attribute) and cur.attr in _SHAPE:
            continue  # `seq_lens.shape[0]`: the batch's size, which an advance keeps
        yield cur
        if isinstance(cur, ast.Subscript):
            stack.append(cur.value)
            continue
        if isinstance(cur, ast.Call):
            name = last_name(cur.func)
            if name in _SHAPE or name in _ALLOC:
                continue
            stack.append(cur.func)
            stack.extend(cur.args)
            stack.extend(k.value for k in cur.keywords if k.arg not in ("device", "dtype", "out"))
            continue
        if isinstance(cur, ast.Lambda):
            continue
        stack.extend(child_nodes(cur))


def _mentions(expr: ast.AST, root: str, values: dict[str, ast.AST], depth: int = 3) -> bool:
    """Whether the values of `expr` are read from `root` (or something under it), also
    through locals bound once."""
    for part in _value_parts(expr):
        if isinstance(part, (ast.Name, ast.Attribute)) and isinstance(getattr(part, "ctx", ast.Load()), ast.Load):
            spelled = ref(part)
            if spelled is None:
                continue
            if spelled == root or spelled.startswith(root + "."):
                return True
            if depth > 0 and isinstance(part, ast.Name) and part.id in values and part.id != root:
                if _mentions(values[part.id], root, values, depth - 1):
                    return True
    return False


def _keyword_derivations(call: ast.Call, values: dict[str, ast.AST], where: str, qual: str) -> Iterator[Derivation]:
    keywords = [k for k in call.keywords if k.arg]
    roots = {k.arg: _root(k.value) for k in keywords}
    spelled = ref(call.func) or last_name(call.func) or "call"
    name = last_name(call.func) or ""
    owner = name if name[:1].isupper() else None
    for kw in keywords:
        own = roots[kw.arg]
        sources = []
        copies = []
        for other in keywords:
            root = roots[other.arg]
            if other is kw or root is None:
                continue
            if root == own:
                # the same value handed over under two names is an alias, not derived; a copy
                # of it on the host (`kv_lens_cpu=kv_lens.cpu()`) is a tensor of its own
                if _transferred(kw.value) and _same_tensor(other.value) and not kw.arg.lstrip("_").startswith(_SNAPSHOT):
                    copies.append(other.arg)
                continue
            if _mentions(kw.value, root, values):
                sources.append(other.arg)
        if sources:
            yield Derivation(kw.arg, tuple(sorted(sources)), "built", f"{where}:{kw.value.lineno}",
                             f"`{spelled}(...)` in `{qual}` sets it from {_names(sorted(sources))}", owner, qual)
        elif copies:
            yield Derivation(kw.arg, tuple(sorted(copies)), "built", f"{where}:{kw.value.lineno}",
                             f"`{spelled}(...)` in `{qual}` sets it to a copy of {_names(sorted(copies))}", owner, qual)


def _assigned_derivation(stmt: ast.Assign, where: str, qual: str, kept: dict[str, str] | None = None,
                         values: dict[str, ast.AST] | None = None) -> Iterator[Derivation]:
    """`obj.f = <expr of obj.g>`; with `kept` (a parameter -> the field of `obj` it is stored
    in, `self.seq_lens = seq_lens` in an `__init__`), `obj.f = <expr of the parameter>` too;
    with `values` (the function's single bindings), `obj.f = local` reads what the local was
    bound to and filled with (`indptr = torch.zeros(n + 1); indptr[1:] =
    torch.cumsum(obj.g, 0)`)."""
    target = stmt.targets[0]
    if not isinstance(target, ast.Attribute):
        return
    obj = ref(target.value)
    if obj is None:
        return
    value = stmt.value
    if values and isinstance(value, ast.Name) and value.id in values and not (kept and value.id in kept):
        value = values[value.id]
    read = set()
    for part in _value_parts(value):
        if isinstance(part, ast.Attribute) and ref(part.value) == obj and part.attr != target.attr:
            read.add(part.attr)
        elif kept and isinstance(part, ast.Name) and part.id in kept and kept[part.id] != target.attr:
            read.add(kept[part.id])
    if read and not _selects(value):
        yield Derivation(target.attr, tuple(sorted(read)), "built", f"{where}:{stmt.lineno}",
                         f"`{obj}.{target.attr} = ...` in `{qual}` sets it from {_names(sorted(read))}", None, qual)


def _selects(value: ast.AST) -> bool:
    """A value that only selects between fields (`a if c else b`, `a or b`) copies, not derives."""
    if isinstance(value, ast.IfExp):
        return all(isinstance(v, (ast.Attribute, ast.Constant, ast.Name, ast.Subscript)) for v in (value.body, value.orelse))
    if isinstance(value, ast.BoolOp):
        return all(isinstance(v, (ast.Attribute, ast.Constant, ast.Name, ast.Subscript)) for v in value.values)
    return False


def _advanced_together(fn: ast.AST, where: str, qual: str) -> Iterator[Derivation]:
    """`x.b += k` then `x.a += k` in one function (or `replace(x, b=x.b + k, a=x.a + k)`):
    the code keeps `a` in step with `b`; the first one advanced is the source."""
    seen: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for obj, field, amount, line in advances_in(fn):
        seen.setdefault((obj, amount), []).append((line, field))
    for (obj, amount), moves in seen.items():
        moves.sort()
        fields: list[str] = []
        for line, field in moves:
            if field.lstrip("_") not in {f.lstrip("_") for f in fields}:
                fields.append(field)
        if len(fields) < 2:
            continue
        lines = {f: min(line for line, g in moves if g == f) for f in fields}
        for field in fields:
            for source in fields:
                if source == field:
                    continue
                # both directions: which one the others follow is decided over all the
                # evidence (`lead`: advanced first here)
                yield Derivation(field, (source,), "advanced-with", f"{where}:{lines[field]}",
                                 f"`{qual}` advances it by `{amount}` with `{obj}.{source}` (line {lines[source]})",
                                 None, qual, lead=source == fields[0])


def advances_in(fn: ast.AST) -> Iterator[tuple[str, str, str, int]]:
    """(object, field, amount as spelled, line) for `x.f += k`, `x.f = x.f + k`,
    `x.f.add_(k)`, `x.f = min(x.f + k, cap)`, `replace(x, f=x.f + k)` and a new object built
    from the old one's values (`Cls(f=x.f + k, ...)`), also through a local (`new = x.f + k`,
    then `f=new`)."""
    first = _first_bindings(fn)
    for sub in walk_local(fn):
        if isinstance(sub, ast.AugAssign) and isinstance(sub.op, ast.Add) and isinstance(sub.target, ast.Attribute):
            obj = ref(sub.target.value)
            if obj:
                yield obj, sub.target.attr, ast.unparse(sub.value), sub.lineno
        elif isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Attribute):
            t = sub.targets[0]
            obj = ref(t.value)
            amount = _plus(sub.value, f"{obj}.{t.attr}", first) if obj else None
            if amount is not None:
                yield obj, t.attr, amount, sub.lineno
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            if sub.func.attr == "add_" and isinstance(sub.func.value, ast.Attribute) and sub.args:
                obj = ref(sub.func.value.value)
                if obj:
                    yield obj, sub.func.value.attr, ast.unparse(sub.args[0]), sub.lineno
        if not isinstance(sub, ast.Call) or not sub.keywords:
            continue
        if last_name(sub.func) == "replace":
            if isinstance(sub.func, ast.Attribute) and ref(sub.func.value) not in ("dataclasses", None):
                obj = ref(sub.func.value)
            else:
                obj = ref(sub.args[0]) if sub.args else None
            if not obj:
                continue
            for kw in sub.keywords:
                if kw.arg:
                    amount = _plus(kw.value, f"{obj}.{kw.arg}", first)
                    if amount is not None:
                        yield obj, kw.arg, amount, kw.value.lineno
        elif _builds(sub):
            for kw in sub.keywords:
                if not kw.arg:
                    continue
                found = _plus_of_field(kw.value, kw.arg, first)
                if found is not None:
                    yield found[0], kw.arg, found[1], kw.value.lineno


def _first_bindings(fn: ast.AST) -> dict[str, ast.AST]:
    """Each local's first plain assignment (`effective = cad.seq_lens`, even if it is
    reassigned later: the value it starts from)."""
    found: dict[str, tuple[int, int, ast.AST]] = {}
    for sub in walk_local(fn):
        if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
            at = (sub.lineno, sub.col_offset)
            name = sub.targets[0].id
            if name not in found or at < found[name][:2]:
                found[name] = (*at, sub.value)
    return {name: v for name, (_, _, v) in found.items()}


def _expand(value: ast.AST, first: dict[str, ast.AST]) -> ast.AST:
    if isinstance(value, ast.Name) and value.id in first:
        return first[value.id]
    return value


def _sum_of(value: ast.AST, first: dict[str, ast.AST]) -> ast.BinOp | None:
    """The addition an advance is spelled with: `a + b`, also inside `min(a + b, cap)` or
    `a + b if ... else ...`, through a local."""
    value = _expand(value, first)
    if isinstance(value, ast.Call) and last_name(value.func) in ("min", "minimum", "clamp") and value.args:
        value = _expand(value.args[0], first)
    if isinstance(value, ast.IfExp):
        value = _expand(value.body, first)
    return value if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) else None


def _plus(value: ast.AST, old: str, first: dict[str, ast.AST] | None = None) -> str | None:
    """`k` when `value` is `old + k` (see `_sum_of`)."""
    first = first or {}
    total = _sum_of(value, first)
    if total is not None:
        for side, other in ((total.left, total.right), (total.right, total.left)):
            if ref(_expand(side, first)) == old:
                return ast.unparse(other)
    return None


def _plus_of_field(value: ast.AST, field: str, first: dict[str, ast.AST]) -> tuple[str, str] | None:
    """(x, k) when a keyword `field=` is given `x.field + k` (or its backing store's)."""
    total = _sum_of(value, first)
    if total is not None:
        for side, other in ((total.left, total.right), (total.right, total.left)):
            side = _expand(side, first)
            if isinstance(side, ast.Attribute) and side.attr in (field, variant_of(field)):
                obj = ref(side.value)
                if obj:
                    return obj, ast.unparse(other)
    return None


def _names(fields: Iterable[str]) -> str:
    return ", ".join(f"`{f}`" for f in fields)


# -- the table -------------------------------------------------------------------------------------


class Table:
    """Derivations by the field they are computed from."""

    def __init__(self, derivations: Iterable[Derivation] = ()) -> None:
        self.all: list[Derivation] = []
        self._by_source: dict[str, list[Derivation]] = {}
        self._seen: set[tuple] = set()
        self.add(derivations)

    def add(self, derivations: Iterable[Derivation]) -> None:
        self._sets: dict[str, set[str]] = {}
        for d in derivations:
            key = (d.field, d.sources, d.kind)
            if key in self._seen:
                continue
            self._seen.add(key)
            self.all.append(d)
            for s in d.sources:
                self._by_source.setdefault(s, []).append(d)

    def derived_from(self, source: str) -> list[Derivation]:
        """Every derivation reading `source` (or its backing store)."""
        out = list(self._by_source.get(source, ()))
        other = source[1:] if source.startswith("_") else "_" + source
        out += self._by_source.get(other, ())
        return out

    def _set(self, key: str, compute) -> set[str]:
        got = self._sets.get(key)
        if got is None:
            got = self._sets[key] = compute()
        return got

    def sources(self) -> set[str]:
        return self._set("sources", lambda: set(self._by_source))

    def exact_sources(self) -> set[str]:
        return self._set("exact", lambda: {s for s, ds in self._by_source.items() if any(d.exact for d in ds)})

    def bound_sources(self) -> set[str]:
        """Sources something is kept as a bound of (not only memos): what an advance stales."""
        return self._set("bounds", lambda: {s for s, ds in self._by_source.items() if any(not d.exact for d in ds)})

    def stepped_sources(self) -> set[str]:
        """The fields draft steps move: those the code advances with others (`seq_lens`), and
        those the configuration names. A write of one through a call is looked for."""
        return self._set("stepped", lambda: {s for s, ds in self._by_source.items() if any(d.kind in ("advanced-with", "configured") for d in ds)})

    def derived_fields(self) -> set[str]:
        return self._set("derived", lambda: {d.field for d in self.all})

    def moving_sources(self) -> set[str]:
        """Sources a write through a call can matter for: those a memo reads, and those the
        code advances with other fields (what draft steps move: `seq_lens`, ...)."""
        return self._set("moving", lambda: {s for s, ds in self._by_source.items() if any(d.exact or d.kind in ("advanced-with", "configured") for d in ds)})


BUNDLED = Path(__file__).resolve().parent.parent / "learned" / "DERIVATIONS.json"


@lru_cache(maxsize=4)
def bundled(path: Path = BUNDLED) -> tuple[Derivation, ...]:
    """What the generator learned from the releases the models were made from."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    return tuple(Derivation.from_json(d) for d in raw.get("derivations", ()))


def configured(extra: dict[str, list[str]]) -> list[Derivation]:
    """`derived-fields` from the configuration: source -> derived fields."""
    return [Derivation(d, (s,), "configured", "configuration", "`derived-fields`") for s, ds in extra.items() for d in ds]


def variant_of(field: str) -> str:
    """The other spelling of a field and its private backing store."""
    return field[1:] if field.startswith("_") else "_" + field
