"""Loops over the attention groups (or layers) of one draft step, and what their iterations do
to what every group shares.

A draft step runs one forward; the metadata of each attention group is built inside a loop
over the groups (`for group in self.draft_attn_groups:`, `for builder in builders:`, `for
layer_name in layer_names:`). Two questions are asked of such a loop (IC006):

- `shared_advances`: which events of one iteration advance the positions or sequence lengths
  of an object that outlives the iteration (a parameter, `self.input_buffers`, a local bound
  before the loop): each group then moves the shared inputs once more, and the step advances
  by the number of groups. An object bound anew in the iteration (`md = copy(common)`,
  `md = group.builder.build(...)`, the loop's own variable) is that group's own: advancing it
  once is what the step asks.
- `last_group_uses`: where a value bound per group in the loop (`attn_metadata =
  group.build(...)`) is handed, after the loop, to every layer (`{name: attn_metadata for
  name in layer_names}`, `set_forward_context(attn_metadata, ...)`, a loop storing it for
  every layer name): only the last group's value survives the loop, so every other group's
  layers get it (the last-entry family of IC001, for a use rather than a check).

A group loop is a `for` whose iterable, or a `while` whose test, names an identifier matching
the group globs (`Names`, the same object the rule's prefilter is built from). A loop whose
iterations run a forward (a name of `forwards`, or a call of the loop's own variable: one MTP
module per step) is a loop over steps, not over groups.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Iterator

from .facts import child_nodes, last_name, ref, target_names, walk_local
from .fields import Locals, added, call_writes, direction, flows_to, local_aliases, local_increment, resolve_call, store_targets, store_writes
from .needs import Names
from .objects import canonical, partials, through_partial
from .project import FunctionInfo
from .singletons import attribute_holds_one, guarantee_of, guaranteed_single, one_element, self_attribute, spellings
from .steps import advanced_tensors, call_advances, handed_field_advances, increments, passed_values

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
STATE = "<state>"  # what a helper advances that no argument names: its instance's or module's


# -- the loops ---------------------------------------------------------------------------------------


def group_loops(func: ast.AST, names: Names) -> list[ast.AST]:
    """The `for`/`while` loops of the function (its own scope) over groups or layers."""
    out = []
    for sub in walk_local(func):
        if isinstance(sub, (ast.For, ast.AsyncFor)):
            header = sub.iter
        elif isinstance(sub, ast.While):
            header = sub.test
        else:
            continue
        if any(names.matches(n) for n in identifiers(header)):
            out.append(sub)
    return out


def names_any(func: ast.AST, names: Names, words: frozenset[str]) -> bool:
    """Whether the function (its own scope) spells an identifier matching `names` or one of
    `words`: a draft step's group loop names the metadata it builds or what it advances (the
    rule's prefilter asks the same of the text)."""
    for node in walk_local(func):
        if isinstance(node, ast.Name):
            spelled = node.id
        elif isinstance(node, ast.Attribute):
            spelled = node.attr
        elif isinstance(node, ast.arg):
            spelled = node.arg
        elif isinstance(node, ast.keyword) and node.arg:
            spelled = node.arg
        else:
            continue
        if spelled in words or names.matches(spelled):
            return True
    args = getattr(func, "args", None)
    return args is not None and any(a.arg in words or names.matches(a.arg) for a in ast.walk(args) if isinstance(a, ast.arg))


def identifiers(expr: ast.AST) -> Iterator[str]:
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr


def own_nodes(loop: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a loop's body (and `else`) that run in its scope."""
    stack = list(loop.body) + list(loop.orelse)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPES):
            stack.extend(child_nodes(node))


def breaks_out(loop: ast.AST) -> bool:
    """A `break` of this loop itself (not of a loop inside it): a search, run up to a hit."""
    stack = list(loop.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Break):
            return True
        if isinstance(node, _LOOPS + _SCOPES):
            continue
        stack.extend(child_nodes(node))
    return False


def loop_targets(loop: ast.AST) -> set[str]:
    return set(target_names(loop.target)) if isinstance(loop, (ast.For, ast.AsyncFor)) else set()


def bound_in(loop: ast.AST) -> dict[str, list[ast.AST]]:
    """Every name the loop's iterations bind (its target, assignments, nested loops, `with`,
    walrus), with the statements that bind it."""
    out: dict[str, list[ast.AST]] = {n: [loop] for n in loop_targets(loop)}
    for node in own_nodes(loop):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and getattr(node, "value", None) is not None:
            targets = [node.target]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
        elif isinstance(node, ast.NamedExpr):
            targets = [node.target]
        for t in targets:
            for name in target_names(t):
                out.setdefault(name, []).append(node)
    return out


def fresh_names(loop: ast.AST, aliases: dict[str, str]) -> set[str]:
    """Names that hold a new object in each iteration: the loop's variables and what the body
    binds, except a name only moved forward there (`positions += 1`, `positions = positions +
    1`) or bound to an object of before the loop (`md = common`: an alias, the same object)."""
    out = set()
    bound = bound_in(loop)
    for name, stmts in bound.items():
        if name in aliases:
            continue  # bound once, to a dotted value: judged through what it names
        own = [s for s in stmts if not _moves_itself(s, name, aliases)]
        if own and not all(_names_shared(s, name, bound) for s in own):
            out.add(name)
    return out


def _names_shared(stmt: ast.AST, name: str, bound: dict) -> bool:
    """`positions = self.input_buffers.positions` (or a view of it, `[:n]`) in the iteration:
    the name holds the object of before the loop, not a new one; an entry picked by the
    iteration's own names (`md = self.mds[i]`) is that group's."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return False
    value = stmt.value
    while isinstance(value, ast.Subscript):
        if any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(value.slice)):
            return False
        value = value.value
    spelled = ref(value) if isinstance(value, ast.Attribute) else None
    return spelled is not None and spelled.split(".", 1)[0] not in bound


def _moves_itself(stmt: ast.AST, name: str, aliases: dict[str, str]) -> bool:
    if isinstance(stmt, ast.AugAssign):
        return True
    return isinstance(stmt, ast.Assign) and direction(stmt.value, name, aliases) is not None


def runs_forward(loop: ast.AST, forwards: frozenset[str]) -> bool:
    """The iterations run the model (a forward call, or a call of the loop's own variable: a
    multi-module MTP's `for module in self.mtp_layers: hidden = module(...)`)."""
    own = loop_targets(loop)
    for node in own_nodes(loop):
        if isinstance(node, ast.Call):
            if last_name(node.func) in forwards:
                return True
            if isinstance(node.func, ast.Name) and node.func.id in own:
                return True
    return False


def holds_one(view, func: ast.AST, loop: ast.AST) -> bool:
    """The loop's collection holds one entry: spelled so, guaranteed before the loop in this
    function (`assert len(groups) == 1`), the loop under `if len(groups) == 1:`, or an
    attribute of `self` every write keeps at one entry."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return False
    spelled = set(spellings(loop.iter))
    singles: set[str] = set()
    parents = _parents(func)
    for st in walk_local(func):
        if isinstance(st, ast.stmt) and (st.lineno, st.col_offset) < (loop.lineno, loop.col_offset):
            got = guarantee_of(st)
            if got is not None:
                singles.add(got)
    if one_element(loop.iter, singles):
        return True
    child: ast.AST = loop
    up = parents.get(id(loop))
    while up is not None and up is not func:
        if isinstance(up, ast.If):
            positive = any(child is s for s in up.body)
            if guaranteed_single(up.test, positive=positive) in spelled:
                return True
        child, up = up, parents.get(id(up))
    attr = self_attribute(loop.iter)
    return attr is not None and attribute_holds_one(view, attr)


def _parents(func: ast.AST) -> dict[int, ast.AST]:
    out: dict[int, ast.AST] = {}
    for node in ast.walk(func):
        for child in child_nodes(node):
            out[id(child)] = node
    return out


# -- (a) advances of shared objects ------------------------------------------------------------------


@dataclass(frozen=True)
class SharedAdvance:
    loop: ast.AST  # the group loop
    node: ast.AST  # the statement or call that advances
    shared: str  # what it advances that outlives the iteration (a dotted name, or STATE)
    via: str | None = None  # the helper, when a call advances it
    kind: str = "field"  # 'field' (a field moved in place), 'local', 'call' (a helper or kernel)


def shared_advances(view, func: ast.AST, loops: list[ast.AST], *, fields: frozenset[str], advancing: frozenset[str],
                    forwards: frozenset[str], depth: int) -> Iterator[SharedAdvance]:
    """Events of a group loop's iteration that advance one of `fields` on an object shared by
    every iteration (see the module docstring). One per event, judged in its innermost group
    loop; loops that break (a search) or run a forward (loops over steps) are left out, and so
    is an advance under a condition that reads only names (`if i == 0:`, `if not advanced:`):
    such a condition picks iterations, which the source does not show."""
    aliases = local_aliases(func)
    summaries = view.ctx.summaries(depth)
    bound = partials(func)  # `bump = functools.partial(advance_inputs, self.input_buffers)`
    inner = _innermost(loops)
    seen: set[int] = set()
    for loop in loops:
        if breaks_out(loop) or runs_forward(loop, forwards):
            continue
        fresh = fresh_names(loop, aliases)
        # a row index the iteration moves (a `while` loop's `gid += 1`) picks its own row too
        rows = fresh | {n for n, stmts in bound_in(loop).items() if stmts and all(_moves_itself(s, n, aliases) for s in stmts)}
        for node, guarded in _events(loop):
            if id(node) in seen or inner.get(id(node)) is not loop or guarded:
                continue
            got = _advance_of(view, node, aliases, fresh, fields, advancing, depth, summaries, bound, rows)
            if got is None:
                continue
            shared, via, kind = got
            seen.add(id(node))
            yield SharedAdvance(loop, node, shared, via, kind)


def _innermost(loops: list[ast.AST]) -> dict[int, ast.AST]:
    """id(node) -> the innermost group loop holding it."""
    out: dict[int, ast.AST] = {}
    for loop in sorted(loops, key=lambda l: (l.lineno, l.col_offset)):  # outer loops first
        for node in own_nodes(loop):
            out[id(node)] = loop
    return out


def _events(loop: ast.AST) -> Iterator[tuple[ast.AST, bool]]:
    """(statement or call, under a condition that only reads names) in the loop's body."""

    own = loop_targets(loop)

    def name_only(test: ast.AST) -> bool:
        reads = [n for n in ast.walk(test) if isinstance(n, (ast.Attribute, ast.Call, ast.Subscript))]
        return not reads and any(isinstance(n, ast.Name) for n in ast.walk(test))

    def picks(test: ast.AST) -> bool:
        # a test that picks iterations: of names only (`if i == 0:`), of what the iteration
        # holds (`if group.builder.supports_shared_advance:`), or a conjunction with one
        if name_only(test) or any(isinstance(n, ast.Name) and n.id in own for n in ast.walk(test)):
            return True
        return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(picks(v) for v in test.values)

    def block(body: list, guarded: bool) -> Iterator[tuple[ast.AST, bool]]:
        for st in body:
            if isinstance(st, _SCOPES):
                continue
            if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                yield st, guarded
            for sub in _calls_of(st):
                yield sub, guarded
            if isinstance(st, ast.If):
                g = guarded or picks(st.test)
                yield from block(st.body, g)
                yield from block(st.orelse, g)
                continue
            for name in ("body", "orelse", "finalbody"):
                inner = getattr(st, name, None)
                if isinstance(inner, list):
                    yield from block(inner, guarded)
            for handler in getattr(st, "handlers", None) or []:
                yield from block(handler.body, guarded)
            subject = getattr(st, "subject", None)
            for k, case in enumerate(getattr(st, "cases", None) or []):
                # `match group.backend_name:` picks iterations as an `if` on it does, but
                # for a first case that takes every value (`case _:`)
                takes_all = k == 0 and case.guard is None and type(case.pattern).__name__ == "MatchAs" and case.pattern.pattern is None
                g = guarded or (subject is not None and picks(subject) and not takes_all) or (case.guard is not None and picks(case.guard))
                yield from block(case.body, g)

    yield from block(loop.body, False)


def _calls_of(st: ast.stmt) -> Iterator[ast.Call]:
    """The calls of a statement's own expressions (not of the statements nested in it)."""
    if isinstance(st, (ast.For, ast.AsyncFor)):
        exprs = [st.iter]
    elif isinstance(st, (ast.While, ast.If)):
        exprs = [st.test]
    elif isinstance(st, (ast.With, ast.AsyncWith)):
        exprs = [i.context_expr for i in st.items]
    elif isinstance(st, (ast.Try, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or type(st).__name__ in ("TryStar", "Match"):
        exprs = [st.subject] if hasattr(st, "subject") else []
    else:
        exprs = [st]
    for expr in exprs:
        stack = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Lambda):
                continue
            if isinstance(node, ast.Call):
                yield node
            stack.extend(child_nodes(node))


def _root(spelled: str | None) -> str | None:
    return spelled.split(".", 1)[0] if spelled else None


def _indexed_by(target: ast.AST, fresh: set[str]) -> bool:
    """`x.seq_lens[i] += 1` with `i` of this iteration: each iteration moves its own slice."""
    while isinstance(target, ast.Attribute):
        target = target.value
    if not isinstance(target, ast.Subscript):
        return False
    return any(isinstance(n, ast.Name) and n.id in fresh for n in ast.walk(target.slice))


def _advance_of(view, node: ast.AST, aliases: Locals, fresh: set[str], fields, advancing, depth,
                summaries, bound=None, rows: set[str] | None = None) -> tuple[str, str | None, str] | None:
    """(the shared object `node` advances, the helper it calls, the kind of advance) or None.
    `rows`: the names whose value each iteration has its own of (an index into a shared
    tensor by one of them moves that iteration's row)."""
    rows = fresh if rows is None else rows

    def shared(spelled: str | None) -> bool:
        root = _root(canonical(spelled, aliases) if spelled else None)
        return root is not None and (root == "self" or root not in fresh)

    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            # a local moved forward: `positions += 1`, `positions = positions + 1`
            if isinstance(t, ast.Name) and t.id in fields and _moves_itself(node, t.id, aliases):
                up = isinstance(node.op, ast.Add) if isinstance(node, ast.AugAssign) else direction(node.value, t.id, aliases) == 1
                if up and shared(t.id):
                    return canonical(t.id, aliases) or t.id, None, "local"
            for piece in store_targets(t):
                for w in store_writes(piece, node, aliases):
                    if w.field in fields and w.sign == 1 and w.kind == "set" and shared(w.obj) and not _indexed_by(piece, rows):
                        return f"{w.obj}.{w.field}", None, "field"
                # `positions[:n] += 1` with `positions = self.input_buffers.positions`, or
                # on the local (a parameter) itself
                if isinstance(node, ast.AugAssign) and isinstance(piece, ast.Subscript) and isinstance(piece.value, ast.Name):
                    held = canonical(piece.value.id, aliases)
                    if (held and held != piece.value.id and held.rsplit(".", 1)[-1] in fields
                            and isinstance(node.op, ast.Add) and shared(held) and not _indexed_by(piece, rows)):
                        return held, None, "field"
                    if (held == piece.value.id and held in fields and isinstance(node.op, ast.Add)
                            and added(node.op, node.value) == 1 and shared(held) and not _indexed_by(piece, rows)):
                        return held, None, "local"
        return None
    call = through_partial(node, bound) if bound else node
    for w in call_writes(call, aliases):
        if w.field in fields and w.sign == 1 and w.kind == "set" and shared(w.obj) and not _indexed_by(call.func.value, rows):
            return f"{w.obj}.{w.field}", None, "field"
    local = local_increment(call)
    if local is not None and local in fields:
        if _indexed_by(call.func.value, rows):
            return None  # `positions[i].add_(1)`: each iteration moves its own row
        return (canonical(local, aliases) or local, None, "local") if shared(local) else None
    kind, fn = resolve_call(view, call)
    if not call_advances(call, fn, fields=fields, advancing=advancing, depth=depth, summaries=summaries):
        return None
    via = ref(call.func) or last_name(call.func)
    roots = None if fn is None else advanced_parameters(summaries, fn, fields, advancing, depth)
    if not roots and fn is not None:
        # a tensor handed as one of the fields, which the function (a kernel's wrapper)
        # advances in place: `bump(self.input_buffers.positions, n)`
        for index in advanced_tensors(call, fn, fields, depth, summaries):
            arg = _argument_at(call, fn, index)
            spelled = ref(arg.value if isinstance(arg, ast.Subscript) else arg) if arg is not None else None
            if spelled is not None and shared(spelled):
                return canonical(spelled, aliases) or spelled, via, "call"
    if not roots:
        if fn is not None and roots is not None and last_name(call.func) not in advancing:
            return None  # the helper advances only objects it makes itself
        # a kernel or helper read by name: what it is given under an advanced name
        given = _named_arguments(call, fields) or [r for r in (ref(v) for v in passed_values(call)) if r]
        if not given:
            return STATE, via, "call"
        hits = [g for g in given if shared(g)]
        # of what it is given, the state kept on the object (`self.input_buffers` beside the
        # step's `draft_tokens`) is what a kernel like `update_eagle_inputs` moves
        hit = next((g for g in hits if _root(canonical(g, aliases)) == "self"), hits[0] if hits else None)
        return (canonical(hit, aliases) or hit, via, "call") if hit is not None else None
    for index, below in sorted(roots, key=str):
        if index == STATE:
            return (below or STATE), via, "call"
        arg = _argument_at(call, fn, index)
        if arg is None:
            continue
        spelled = ref(arg)
        if spelled is not None and shared(spelled):
            spelled = canonical(spelled, aliases) or spelled
            return (f"{spelled}.{below}" if below else spelled), via, "call"
    return None


def _named_arguments(call: ast.Call, fields: frozenset[str]) -> list[str]:
    out = []
    for kw in call.keywords:
        r = ref(kw.value)
        if r and (kw.arg in fields or r.rsplit(".", 1)[-1] in fields):
            out.append(r)
    for arg in call.args:
        r = ref(arg.value if isinstance(arg, ast.Starred) else arg)
        if r and r.rsplit(".", 1)[-1] in fields:
            out.append(r)
    return out


def _argument_at(call: ast.Call, fn: FunctionInfo, index: int) -> ast.AST | None:
    """What a call gives the parameter `index` of the function it runs (the receiver for a
    bound method's first parameter)."""
    from .fields import bound_offset

    params = fn.facts.params
    offset = bound_offset(call.func, fn)
    if index < offset:
        return call.func.value if isinstance(call.func, ast.Attribute) else None
    pos = index - offset
    if pos < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: pos + 1]):
        return call.args[pos]
    name = params[index] if index < len(params) else None
    return next((k.value for k in call.keywords if k.arg == name), None)


def advanced_parameters(summaries, fn: FunctionInfo, fields: frozenset[str], advancing: frozenset[str],
                        depth: int) -> set[tuple] | None:
    """What `fn` advances, as its callers see it: (index of a parameter, the path below it:
    `input_buffers` for `self.input_buffers.positions += 1`) for every parameter whose fields
    it moves forward (or the parameter itself, when it is named like a field), and (`STATE`,
    path) for an object no parameter names (a module global). Objects it makes itself (`md =
    copy(common); md.seq_lens += 1`) are not in it. None when its body cannot be read."""
    return _advanced(summaries, fn, fields, advancing, depth, frozenset())


def _advanced(summaries, fn: FunctionInfo, fields, advancing, depth, visiting) -> set | None:
    ident = (str(fn.module.path), fn.qual)
    if ident in visiting:
        return set()
    visiting = visiting | {ident}
    node = fn.node()
    if node is None:
        return None
    params = fn.facts.params
    facts_aliases = fn.facts.aliases
    made_here = _locals(node)

    def where(spelled: str | None, below: str = ""):
        """(parameter index or STATE, path below it), or None (a local of `fn`)."""
        if not spelled:
            return None
        if below:
            spelled = f"{spelled}.{below}"
        seen = set()
        root, _, rest = spelled.partition(".")
        while root in facts_aliases and root not in seen and root not in params:
            seen.add(root)
            spelled = facts_aliases[root] + (f".{rest}" if rest else "")
            root, _, rest = spelled.partition(".")
        if root in params:
            return params.index(root), rest
        if root in made_here:
            return None
        return STATE, spelled

    out: set = set()
    for i, p in enumerate(params):
        if p in fields:
            out.add((i, ""))
    for st in fn.facts.stores:
        if st.attr in fields and st.op != "replace" and increments(st.op, st.delta):
            got = where(f"{st.target}.{st.attr}" if st.target else None)
            if got is not None:
                out.add(got)
    for call in fn.facts.calls:
        if call.name in advancing:
            # a kernel: what it is given under an advanced name (`seq_lens=md.seq_lens`), else
            # everything it is given
            named = [v for k, v in call.kwargs.items() if v and (k in fields or v.rsplit(".", 1)[-1] in fields)]
            named += [a for a in call.args if a and a.rsplit(".", 1)[-1] in fields]
            for spelled in named or list(call.args) + list(call.kwargs.values()):
                got = where(spelled)
                if got is not None:
                    out.add(got)
    # a field of a parameter handed to a function that advances the tensor it is given
    # (`_shift(input_buffers.positions, n)`), whatever that function calls its parameter
    for spelled in handed_field_advances(summaries, fn, fields, depth):
        got = where(spelled)
        if got is not None:
            out.add(got)
    if depth > 0:
        for callee in summaries.callees(fn):
            target = callee.function
            if target is None or callee.call.name in advancing:
                continue
            sub = _advanced(summaries, target, fields, advancing, depth - 1, visiting)
            if not sub:
                continue
            call = callee.call
            tparams = target.facts.params
            offset = 1 if (target.facts.cls is not None and call.recv is not None and tparams[:1] in (["self"], ["cls"])) else 0
            for index, below in sub:
                if index == STATE:
                    out.add((STATE, below))
                    continue
                if index < offset:
                    spelled = call.recv
                elif index - offset < len(call.args):
                    spelled = call.args[index - offset]
                else:
                    spelled = call.kwargs.get(tparams[index]) if index < len(tparams) else None
                got = where(spelled, below)
                if got is not None:
                    out.add(got)
    return out


def _locals(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for sub in walk_local(node):
        if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (sub.targets if isinstance(sub, ast.Assign) else [sub.target]):
                if isinstance(t, (ast.Name, ast.Tuple, ast.List)):
                    out.update(target_names(t))
        elif isinstance(sub, (ast.For, ast.AsyncFor, ast.comprehension, ast.NamedExpr)):
            out.update(target_names(sub.target))
        elif isinstance(sub, (ast.With, ast.AsyncWith)):
            for i in sub.items:
                if i.optional_vars is not None:
                    out.update(target_names(i.optional_vars))
    return out


# -- (b) the last group's value handed to every layer ------------------------------------------------


@dataclass(frozen=True)
class LastGroupUse:
    loop: ast.AST  # the group loop
    name: str  # the value it binds per group
    bind: ast.AST  # where it is bound
    use: ast.AST  # where, after the loop, every layer gets it
    how: str  # 'dict' (a per-layer mapping), 'store' (a loop storing it per layer), 'forward', 'helper'


def last_group_uses(view, func: ast.AST, loops: list[ast.AST], *, metadata: Names, forwards: frozenset[str],
                    depth: int) -> Iterator[LastGroupUse]:
    """After a group loop, the first place that hands a value it bound per group (a name
    matching `metadata`, bound from what the iteration binds) to every layer. Not: a loop
    that breaks (a search), a collection known to hold one entry, a name rebound before the
    use, an accumulator (`md = merge(md, ...)`)."""
    parents = None
    for loop in loops:
        if not isinstance(loop, _LOOPS) or breaks_out(loop):
            continue
        per_group = _per_group_values(loop, metadata)
        if not per_group:
            continue
        if parents is None:
            parents = _parents(func)
        own = set(bound_in(loop))
        for name, bind in per_group.items():
            use = _first_every_layer_use(view, func, loop, name, own, parents, forwards, depth)
            if use is None:
                continue
            if holds_one(view, func, loop):
                break
            yield LastGroupUse(loop, name, bind, use[0], use[1])


def _per_group_values(loop: ast.AST, metadata: Names) -> dict[str, ast.AST]:
    """Metadata names the loop binds from what its iteration binds (`md = group.build(...)`,
    `md = builders[i].build(...)` in a `while` counting `i`), not from themselves."""
    own = set(bound_in(loop))
    out: dict[str, ast.AST] = {}
    for node in own_nodes(loop):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
        elif isinstance(node, ast.NamedExpr):
            targets, value = [node.target], node.value
        else:
            continue
        names = {t.id for t in targets if isinstance(t, ast.Name) and metadata.matches(t.id)}
        if not names:
            continue
        read = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        if read & names:
            continue  # an accumulator: every group's value is in it
        if read & (own - names):
            for name in names:
                out.setdefault(name, node)
    return out


def _following(func: ast.AST, stmt: ast.AST, parents: dict[int, ast.AST]) -> Iterator[ast.stmt]:
    """The statements that run after `stmt`, in order: the rest of its block, then the rest of
    each enclosing block, up to the function's end (one pass: not the next turn of a loop).
    A loop's `else:` runs first: after the loop, when it does not break."""
    if isinstance(stmt, _LOOPS):
        yield from stmt.orelse
    child = stmt
    up = parents.get(id(stmt))
    while up is not None:
        for name in ("body", "orelse", "finalbody"):
            block = getattr(up, name, None)
            if isinstance(block, list) and any(s is child for s in block):
                at = next(i for i, s in enumerate(block) if s is child)
                yield from block[at + 1:]
                break
        if up is func or isinstance(up, _SCOPES):
            return
        child, up = up, parents.get(id(up))


def _binds(st: ast.AST, name: str) -> bool:
    for node in [st, *walk_local(st)]:
        targets: list = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.NamedExpr)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not st:
            continue
        if any(name in target_names(t) for t in targets):
            return True
    return False


def _is(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _reads_any(expr: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(expr))


def _first_every_layer_use(view, func, loop, name: str, own: set[str], parents, forwards, depth) -> tuple[ast.AST, str] | None:
    for st in _following(func, loop, parents):
        if _binds(st, name):
            return None
        got = _every_layer_use(view, st, name, own, forwards, depth)
        if got is not None:
            return got
    return None


def _every_layer_use(view, st: ast.stmt, name: str, own: set[str], forwards, depth) -> tuple[ast.AST, str] | None:
    # what the group loop bound (its variable, `layer_names = group.layer_names`) names the
    # last group's own layers: pairing them with its value is no hand-out to every layer
    for node in [st, *walk_local(st)]:
        if isinstance(node, ast.DictComp) and _is(node.value, name):
            if not any(_reads_any(g.iter, own | {name}) for g in node.generators):
                return node, "dict"
        elif isinstance(node, ast.Call):
            if ref(node.func) == "dict.fromkeys" and len(node.args) == 2 and _is(node.args[1], name):
                if not _reads_any(node.args[0], own):
                    return node, "dict"
                continue
            if not any(_is(v, name) for v in passed_values(node)):
                continue
            if last_name(node.func) in forwards:
                return node, "forward"
            if _helper_forwards(view, node, name, forwards, depth):
                return node, "helper"
        elif isinstance(node, (ast.For, ast.AsyncFor)) and not _reads_any(node.iter, own):
            keys = set(target_names(node.target))
            for sub in own_nodes(node):
                if isinstance(sub, ast.Assign) and _is(sub.value, name):
                    for t in sub.targets:
                        if isinstance(t, ast.Subscript) and _reads_any(t.slice, keys):
                            return sub, "store"
    return None


def _helper_forwards(view, call: ast.Call, name: str, forwards: frozenset[str], depth: int) -> bool:
    """A project function given the value passes it on to a forward (`self._run(md)` calling
    `set_forward_context(md, ...)`)."""
    from .fields import bound_offset, parameter_index

    _, fn = resolve_call(view, call)
    if fn is None:
        return False
    summaries = view.ctx.summaries(depth)
    test: Callable = lambda c: c.name in forwards
    key = f"forward:{sorted(forwards)}"
    offset = bound_offset(call.func, fn)
    return any(flows_to(summaries, fn, i, test, key) for i in parameter_index(fn, call, offset, lambda a: _is(a, name)))
