"""What the steps of a loop do, as a rule asks it: the calls a function's loops make and the
local aliases it binds, what a call is given, whether an event advances some fields (itself,
through a project function or the helpers that one calls), which `if` branches skip an event,
and the paths inside a loop from an event that changes something to a later use that cross no
renewal of it.

These are questions of loops over draft steps (IC005: metadata passed to every forward while
the inputs advance), written so that another rule can ask them of its own events.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterator

from .facts import child_nodes, last_name, ref, target_names, walk_local
from .fields import FieldFlow, direction, local_increment, updating_loops, writes_at
from .flow import Flow, Loop, atoms_of
from .project import FunctionInfo

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def passed_values(call: ast.Call) -> Iterator[ast.AST]:
    """The values a call is given: its positional arguments (a `*args` as `args`) and keywords."""
    for arg in call.args:
        yield arg.value if isinstance(arg, ast.Starred) else arg
    for kw in call.keywords:
        yield kw.value


def loop_calls_and_aliases(func: ast.AST) -> tuple[list[ast.Call], dict[str, str]]:
    """The calls inside the function's loops (its own scope), and its local aliases (names
    bound once, by a plain assignment, to a dotted value; not parameters). Expressions are
    walked inside loops only: most functions that pass metadata around have none."""
    calls: list[ast.Call] = []
    bound: dict[str, set[str | None]] = {}
    args = getattr(func, "args", None)
    params: set[str] = set()
    if args is not None:
        params = {a.arg for a in (args.posonlyargs + args.args + args.kwonlyargs)}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}

    def bind(target: ast.AST, value: str | None) -> None:
        # only the names a target binds: `md.seq_lens += 1` writes a field of `md`, it does
        # not bind `md` to something else
        for name in target_names(target):
            bound.setdefault(name, set()).add(value if isinstance(target, ast.Name) else None)

    def loop_calls(loop: ast.AST) -> None:
        stack = list(child_nodes(loop))
        while stack:
            node = stack.pop()
            if isinstance(node, _SCOPES):
                continue
            if isinstance(node, ast.Call):
                calls.append(node)
            elif isinstance(node, ast.NamedExpr):
                bind(node.target, None)
            stack.extend(child_nodes(node))

    def block(body: list, in_loop: bool) -> None:
        for st in body:
            if isinstance(st, _SCOPES):
                bound.setdefault(st.name, set()).add(None)
                continue
            if isinstance(st, ast.Assign):
                for t in st.targets:
                    bind(t, ref(st.value) if len(st.targets) == 1 else None)
            elif isinstance(st, (ast.AnnAssign, ast.AugAssign)):
                bind(st.target, ref(st.value) if isinstance(st, ast.AnnAssign) and st.value is not None else None)
            elif isinstance(st, (ast.For, ast.AsyncFor)):
                bind(st.target, None)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                for item in st.items:
                    if item.optional_vars is not None:
                        bind(item.optional_vars, None)
            elif isinstance(st, (ast.Import, ast.ImportFrom)):
                for alias in st.names:
                    bound.setdefault((alias.asname or alias.name).split(".")[0], set()).add(None)
            is_loop = isinstance(st, _LOOPS)
            if is_loop and not in_loop:
                loop_calls(st)
            for name in ("body", "orelse", "finalbody"):
                inner = getattr(st, name, None)
                if isinstance(inner, list):
                    block(inner, in_loop or is_loop)
            for handler in getattr(st, "handlers", None) or []:
                if handler.name:
                    bound.setdefault(handler.name, set()).add(None)
                block(handler.body, in_loop or is_loop)
            for case in getattr(st, "cases", None) or []:
                block(case.body, in_loop or is_loop)

    block(getattr(func, "body", []), False)
    aliases = {}
    for name, values in bound.items():
        if len(values) == 1 and name not in params:
            (value,) = values
            if value is not None and value != name and not value.startswith(name + "."):
                aliases[name] = value
    return calls, aliases


# -- does an event advance some fields ------------------------------------------------------------


def increments(op: str, delta: int | None) -> bool:
    """Whether a write of a field, as the summaries record it (`+=`, `add_`, `=` with a known
    delta), moves it forward."""
    return op in ("+=", "add_") or (op in ("=", "replace", "out", "rows=", "copy_") and delta is not None and delta > 0)


def touches_fields(summaries, fn: FunctionInfo, fields: frozenset[str], depth: int) -> bool:
    """Whether a function, or one it calls (`depth` deep), reads or writes one of `fields` (an
    attribute or a name): what an advancing kernel launch is given."""
    seen: set[tuple[str, str]] = set()
    stack = [(fn, depth)]
    while stack:
        cur, d = stack.pop()
        ident = (str(cur.module.path), cur.qual)
        if ident in seen:
            continue
        seen.add(ident)
        node = cur.node()
        if node is None or any(p in fields for p in cur.facts.params):
            return True
        for sub in walk_local(node):
            if isinstance(sub, ast.Attribute) and sub.attr in fields:
                return True
            if isinstance(sub, ast.Name) and sub.id in fields:
                return True
        if d > 0:
            stack.extend((c.function, d - 1) for c in summaries.callees(cur) if c.function is not None)
    return False


def advances_fields(flow: FieldFlow, n: int, *, fields: frozenset[str], advancing: frozenset[str], depth: int,
                    summaries, aliases: dict[str, str], call_at: Callable[[int], ast.Call],
                    resolve: Callable[[ast.Call], FunctionInfo | None]) -> bool:
    """Whether event `n` of the flow moves one of `fields` forward: a bind (`positions += 1`,
    `positions = positions + 1`), a store or in-place call on one (`x.positions += 1`,
    `positions.add_(1)`), a call of an `advancing` function (a project function of that name
    only if it touches the fields, `depth` deep), or a project function that increments one
    (through a parameter, or on whatever object a helper it calls writes).

    `call_at(n)`: the call event `n` makes (a local `partial` unwrapped); `resolve(call)`: the
    project function it reaches, or None."""
    node = flow.nodes[n]
    if node.kind == "bind" and node.name in fields:
        stmt = node.node
        if isinstance(stmt, ast.AugAssign):
            return isinstance(stmt.op, ast.Add)
        # `positions = positions + 1`
        return isinstance(stmt, ast.Assign) and direction(stmt.value, node.name, aliases) == 1
    if node.kind not in ("call", "store"):
        return False
    for w in writes_at(flow, n, aliases):
        if w.field in fields and w.sign == 1 and w.kind == "set":
            return True
    if node.kind != "call":
        return False
    call = call_at(n)
    if local_increment(call) in fields:
        return True  # `positions.add_(1)`, `torch.add(positions, 1, out=positions)`
    return call_advances(call, resolve(call), fields=fields, advancing=advancing, depth=depth, summaries=summaries)


def call_advances(call: ast.Call, fn: FunctionInfo | None, *, fields: frozenset[str], advancing: frozenset[str],
                  depth: int, summaries) -> bool:
    """Whether a call (to `fn`, the project function it reaches, or None) advances one of
    `fields`: an `advancing` function, or a project function that increments one itself or
    through the helpers it calls (see `advances_fields`)."""
    if last_name(call.func) in advancing:
        # a project function of that name advances only if it touches the inputs: a
        # multi-module MTP shifts token ids between modules at the same positions
        return fn is None or touches_fields(summaries, fn, fields, depth)
    if fn is None:
        return False
    if summaries.reaches(fn, lambda c: c.name in advancing, f"advances:{sorted(advancing)}"):
        return True
    for i in range(len(fn.facts.params)):
        for attr, op, delta in summaries.fields_written(fn, i):
            if attr in fields and increments(op, delta):
                return True
    # or a helper it calls increments one, on whatever object (`self.input_buffers`)
    if summaries.reaches(
        fn, lambda c: False, f"increments:{sorted(fields)}",
        own=lambda facts: any(st.attr in fields and increments(st.op, st.delta) for st in facts.stores),
    ):
        return True
    # or it advances a tensor it is handed as one of them (`bump(md.positions)`: a helper of
    # any module, a Triton kernel that `tl.store`s its load plus one, through wrappers)
    return bool(advanced_tensors(call, fn, fields, depth, summaries)) or _hands_a_field_on(summaries, fn, fields, depth, set())


def _hands_a_field_on(summaries, fn: FunctionInfo, fields: frozenset[str], depth: int, seen: set) -> bool:
    """`handed_field_advances` of `fn` or of a helper it calls, `depth` calls deep."""
    ident = (str(fn.module.path), fn.qual)
    if depth <= 0 or ident in seen:
        return False
    seen.add(ident)
    if handed_field_advances(summaries, fn, fields, depth):
        return True
    return any(c.function is not None and _hands_a_field_on(summaries, c.function, fields, depth - 1, seen) for c in summaries.callees(fn))


def handed_field_advances(summaries, fn: FunctionInfo, fields: frozenset[str], depth: int) -> list[str]:
    """The fields (as `fn` spells them: `input_buffers.positions`) that `fn`, or a helper it
    calls, hands on to a function that advances the tensor it is given in place
    (`_shift(input_buffers.positions, n)` where `_shift` does `positions[:n] += 1`)."""
    from .tensor_writes import ADVANCES, argument_writes

    out: list[str] = []
    if depth <= 0:
        return out
    for callee in summaries.callees(fn):
        target = callee.function
        if target is None:
            continue
        call = callee.call
        params = target.facts.params
        offset = 1 if (target.facts.cls is not None and call.recv is not None and params[:1] in (["self"], ["cls"])) else 0
        given = [(pos + offset, a) for pos, a in enumerate(call.args)] + [
            (params.index(k), v) for k, v in call.kwargs.items() if k in params]
        for index, spelled in given:
            if spelled and "." in spelled and spelled.rsplit(".", 1)[-1] in fields and index < len(params):
                if argument_writes(summaries, target, index, depth - 1) == ADVANCES:
                    out.append(spelled)
    out += [s for s in _launched_field_advances(summaries, fn, fields, depth) if s not in out]
    return out


def _launched_field_advances(summaries, fn: FunctionInfo, fields: frozenset[str], depth: int) -> list[str]:
    """The fields `fn` hands to a Triton kernel it launches (`kernel[grid](input_buffers.positions,
    ...)`) that the kernel advances through the pointer it gets: a wrapper handed the buffers."""
    from .tensor_writes import ADVANCES, argument_writes

    node = fn.node()
    if node is None or not any(c.name is None or c.ref is None for c in fn.facts.calls):
        return []
    out: list[str] = []
    for sub in walk_local(node):
        if not (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Subscript)):
            continue
        kernel = summaries.function_for(summaries.resolve(fn, ref(sub.func.value)))
        if kernel is None:
            continue
        kparams = kernel.facts.params
        given = list(enumerate(sub.args)) + [(kparams.index(k.arg), k.value) for k in sub.keywords if k.arg in kparams]
        for index, arg in given:
            spelled = ref(arg)
            if spelled and "." in spelled and spelled.rsplit(".", 1)[-1] in fields and index < len(kparams):
                if argument_writes(summaries, kernel, index, depth - 1) == ADVANCES and spelled not in out:
                    out.append(spelled)
    return out


def advanced_tensors(call: ast.Call, fn: FunctionInfo, fields: frozenset[str], depth: int, summaries) -> list[int]:
    """The parameters of `fn` named like one of `fields`, or given one by the call, that it
    advances in place (`tensor_writes.argument_writes`)."""
    from .tensor_writes import ADVANCES, argument_writes

    return [i for i in _handed_fields(call, fn, fields) if argument_writes(summaries, fn, i, depth) == ADVANCES]


def _handed_fields(call: ast.Call, fn: FunctionInfo, fields: frozenset[str]) -> list[int]:
    """The parameters of `fn` named like one of `fields`, or given one by the call."""
    from .fields import bound_offset, parameter_index

    params = fn.facts.params
    out = [i for i, p in enumerate(params) if p in fields]
    offset = bound_offset(call.func, fn)
    for arg in list(call.args) + [k.value for k in call.keywords]:
        base = arg.value if isinstance(arg, ast.Subscript) else arg
        if (ref(base) or "").rsplit(".", 1)[-1] in fields:
            out += [i for i in parameter_index(fn, call, offset, lambda a, arg=arg: a is arg) if i not in out]
    return out


# -- branches and paths ----------------------------------------------------------------------------


def loop_counters(func: ast.AST) -> set[str]:
    """Names a loop of the function counts with: `for` targets, names augmented in a `while`."""
    out: set[str] = set()
    for sub in walk_local(func):
        if isinstance(sub, (ast.For, ast.AsyncFor)):
            out.update(n.id for n in ast.walk(sub.target) if isinstance(n, ast.Name))
        elif isinstance(sub, ast.While):
            for inner in walk_local(sub):
                if isinstance(inner, ast.AugAssign) and isinstance(inner.target, ast.Name):
                    out.add(inner.target.id)
    return out


def reads_only(test: ast.AST, names: set[str]) -> bool:
    """Whether a test reads nothing but `names` (no attribute, call or subscript)."""
    read = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    attrs = [n for n in ast.walk(test) if isinstance(n, (ast.Attribute, ast.Call, ast.Subscript))]
    return bool(read) and read <= names and not attrs


def _holds(body: list[ast.stmt], ids: set[int]) -> bool:
    for st in body:
        for sub in ast.walk(st):
            if id(sub) in ids:
                return True
    return False


def skipping_branches(flow: Flow, func: ast.AST, is_event: Callable[[int], bool], unless: Callable[[int], bool] | None = None) -> set[int]:
    """The cond events of the branch of an `if` that skips an event (`is_event`), for tests the
    source cannot decide (not only the loop counters): a search may take them as never taken
    when what the event answers has happened. Not a branch that holds an `unless` event
    itself (an `else:` that runs the step the event prepares, without it: a path of its own)."""
    counters = loop_counters(func)
    by_test: dict[int, list[int]] = {}
    for node in flow.nodes:
        if node.kind == "cond":
            by_test.setdefault(id(node.node), []).append(node.index)
    marked = {id(flow.nodes[n].node) for n in range(len(flow.nodes)) if is_event(n)}
    others = {id(flow.nodes[n].node) for n in range(len(flow.nodes)) if unless(n)} if unless is not None else set()
    out: set[int] = set()
    for sub in walk_local(func):
        if not isinstance(sub, ast.If):
            continue
        in_body = _holds(sub.body, marked)
        in_else = _holds(sub.orelse, marked)
        if in_body == in_else or reads_only(sub.test, counters):
            continue
        if others and _holds(sub.orelse if in_body else sub.body, others):
            continue
        skip = atoms_of(sub.test, not in_body)
        for n in by_test.get(id(sub.test), []):
            if flow.nodes[n].atoms == skip:
                out.add(n)
    return out


def _range_start(loop: Loop) -> tuple[str, int] | None:
    """(counter, first value) of `for v in range(a, b[, k])` with constant `a` (0 when left
    out) and a positive constant step."""
    st = loop.node
    if not (isinstance(st, (ast.For, ast.AsyncFor)) and isinstance(st.target, ast.Name)):
        return None
    it = st.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords and 1 <= len(it.args) <= 3):
        return None
    start = it.args[0] if len(it.args) >= 2 else ast.Constant(0)
    step = it.args[2] if len(it.args) == 3 else ast.Constant(1)
    if not (isinstance(start, ast.Constant) and type(start.value) is int and isinstance(step, ast.Constant) and type(step.value) is int and step.value > 0):
        return None
    return st.target.id, start.value


def _false_on_later_turns_of(flow: Flow) -> dict[int, int]:
    got = flow.__dict__.get("_later_false")
    if got is None:
        got = flow.__dict__["_later_false"] = _false_on_later_turns(flow)
    return got


def _false_on_later_turns(flow: Flow) -> dict[int, int]:
    """cond event -> its counted loop, for the branches of a test of the loop's counter alone
    that no turn after the first takes (`if step > 0:` in `for step in range(n)`: its false
    branch): a path that reached it around the loop's back edge cannot take them."""
    from .switch_paths import counter_atom

    out: dict[int, int] = {}
    for pos, loop in enumerate(flow.loops):
        counted = _range_start(loop)
        if counted is None:
            continue
        counter, start = counted
        for i in loop.members:
            node = flow.nodes[i]
            if node.kind != "cond" or not node.atoms or node.loops[-1:] != (pos,):
                continue
            for source, polarity in node.atoms:
                values = [counter_atom(source, counter, v) for v in (start + 1, start + 2, start + 3, start + 10, start + 1000)]
                if all(v is not None and v != polarity for v in values):
                    out[i] = pos
                    break
    return out


def changed_before_use(flow: Flow, uses: list[int], renews: Callable[[int], bool], changes: Callable[[int], bool],
                       assumed: set[int] = frozenset()) -> Iterator[tuple[Loop, int, int]]:
    """In the loops that run the `uses` (events of the flow, in its loops): each event that
    `changes` something from which a use is reached inside the same outermost loop without a
    renewal (`renews`, or the head of a loop that renews on every turn) and without taking a
    cond event of `assumed`: (the innermost loop holding both, the change, the use), at most
    one use per change. A use that also changes (it runs a step, then prepares the next one)
    counts from itself, to the next turn's use.

    Only events from which a use is reached without a renewal are asked whether they change
    (backwards from each use first): `changes` may be costly."""
    use_set = set(uses)
    members: set[int] = set()
    for n in uses:
        members |= flow.loops_of(n)[0].members
    reach: set[int] = set()
    for f in uses:
        outer_f = flow.loops_of(f)[0]
        heads_f = updating_loops(flow, f, renews)

        def back(node, outer=outer_f, heads=heads_f):
            i = node.index
            if i != outer.head and i not in outer.members:
                return "exit"
            if renews(i) or i in heads:
                return "refresh"
            if node.kind == "cond" and i in assumed:
                return "assumed"
            reach.add(i)
            return "fwd" if i in use_set else None

        flow.search(f, False, back)
    # a renewal that also changes moves the object with what it depends on
    changed = [n for n in sorted(members & reach) if n not in use_set and changes(n) and not renews(n)]
    changed += [n for n in uses if changes(n)]
    for a in changed:
        loops = flow.loops_of(a)
        outer = loops[0]
        heads = updating_loops(flow, a, renews)

        def stop(node, outer=outer, heads=heads, a=a):
            i = node.index
            if i != outer.head and i not in outer.members:
                return "exit"
            if i in use_set:  # also `a` itself, met again on the next step
                return "fwd"
            if renews(i) or i in heads:
                return "refresh"
            if node.kind == "cond" and i in assumed:
                return "assumed"
            return None

        later = {c for c, l in _false_on_later_turns_of(flow).items() if c < a and a in flow.loops[l].members}

        def stop_later(node, stop=stop, later=later):
            # a test of the counter before the change is met on a later turn only
            return "assumed" if node.index in later else stop(node)

        paths = flow.search(a, True, stop_later, flow.known_at(a))
        for path in paths.get("fwd", []):
            hit = path[-1]
            common = [l for l in loops if hit in l.members]
            if common:
                yield common[-1], a, hit
                break
