"""Control facts of one function: the order of its calls and bindings on every path.

`Flow(node)` is a control-flow graph whose nodes are *events* (a call, after its arguments;
the binding of a name) and *conditions* (a branch taken: `if self.share:` true). Paths are
walked with `Flow.search`, which stops where the caller's classifier says so and prunes a
branch whose condition contradicts what is known where the search started (a switch under
`if self.share:` does not take the `else` of a later `if self.share:`).

Conditions are *atoms*: the source of a test (`self.share`, `step == 1`), with `and`/`or`/`not`
split where that is exact. An atom is *stable* in a function when nothing it reads is
assigned there; only stable atoms are known across the path. `known_at(idx, fixed=True)` also
knows atoms over *fixed locals*: names bound once, outside any loop, and read as plain values
(`share = self.index_share and ...` then `if share:` twice).

`Flow.empty(atom)` says whether taking a branch asserts that there is nothing to act on: a
size that is zero (`x.numel() == 0`, `len(x) == 0`, `x.shape[0] == 0`, `not len(x)`, `not n`
where `n` holds a size, `num_rows == 0`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterable, Iterator

from .facts import FUNCS, child_nodes, pattern_names, ref, target_names

ENTRY, EXIT = -1, -2
Atom = tuple[str, bool]  # (source, polarity)


@dataclass
class Node:
    index: int
    kind: str  # 'call', 'bind', 'cond', 'join', 'exit' (a `with` item's `__exit__`), 'yield'
    node: ast.AST | None = None  # the Call / the binding statement / the test
    name: str | None = None  # bound name for 'bind'
    atoms: tuple[Atom, ...] = ()  # for 'cond': what taking this branch asserts
    conds: tuple[Atom, ...] = ()  # branch conditions around it (innermost last)
    loops: tuple[int, ...] = ()  # ids of the loops around it (innermost last)


@dataclass
class Loop:
    index: int
    node: ast.AST
    head: int  # the node a new iteration starts from
    members: set[int] = field(default_factory=set)  # nodes inside the loop (body, test)


def atom_source(test: ast.AST) -> str:
    try:
        return ast.unparse(test)
    except Exception:  # a node unparse cannot print: compare by structure
        return ast.dump(test)


def atoms_of(test: ast.AST, polarity: bool) -> tuple[Atom, ...]:
    """What taking a branch of `test` with `polarity` asserts, as atoms."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return atoms_of(test.operand, not polarity)
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.And) and polarity:
            return tuple(a for v in test.values for a in atoms_of(v, True))
        if isinstance(test.op, ast.Or) and not polarity:
            return tuple(a for v in test.values for a in atoms_of(v, False))
        # the other way, a disjunction no atom says: kept so that a search can tell when
        # every operand is decided (`if a and b:` is not left by its `else` when a and b hold)
        source = atom_source(test)
        if source not in _JUNCTIONS:
            _JUNCTIONS[source] = (isinstance(test.op, ast.And), tuple(atoms_of(v, isinstance(test.op, ast.And)) for v in test.values))
        return ((source, polarity),)
    return ((atom_source(test), polarity),)


# source of a BoolOp -> (an `and`?, the atoms each operand's holding (for `and`) or failing
# (for `or`) asserts)
_JUNCTIONS: dict[str, tuple[bool, tuple[tuple[Atom, ...], ...]]] = {}
# constant tests: the branch they rule out
_CONSTANT_TESTS = {"True": True, "False": False, "None": False}


class Flow:
    def __init__(self, func: ast.AST) -> None:
        self.func = func
        self.nodes: list[Node] = []
        self.succ: dict[int, set[int]] = {ENTRY: set()}
        self.pred: dict[int, set[int]] = {EXIT: set()}
        self.loops: list[Loop] = []
        self._conds: list[Atom] = []
        self._loops: list[int] = []
        self._breaks: list[list[int]] = []
        self._continues: list[list[int]] = []
        self._finally: list[list[int]] = []
        self._stable_memo: dict[str, bool] = {}
        self.by_call: dict[int, int] = {}  # id(ast.Call) -> node index
        body = func.body if isinstance(func, (*FUNCS, ast.Module)) else [func]
        ends = self._block(body, {ENTRY})
        self._link(ends, EXIT)
        self.assigned: set[str] = _assigned_names(func)

    @cached_property
    def _locals(self) -> tuple[set[str], set[str]]:
        return _fixed_locals(self.func)

    @property
    def fixed(self) -> set[str]:
        """Names bound once, by a plain assignment outside any loop (not parameters)."""
        return self._locals[0]

    @property
    def sizes(self) -> set[str]:
        """Locals every binding of which is a size (`n = rows.numel()`)."""
        return self._locals[1]

    # -- building ------------------------------------------------------------------------
    def _new(self, kind: str, node: ast.AST | None = None, name: str | None = None, atoms=()) -> int:
        idx = len(self.nodes)
        self.nodes.append(Node(idx, kind, node, name, tuple(atoms), tuple(self._conds), tuple(self._loops)))
        self.succ[idx] = set()
        self.pred[idx] = set()
        for loop in self._loops:
            self.loops[loop].members.add(idx)
        return idx

    def _leave(self, preds) -> None:
        """A `return` from `preds`: through the `finally` blocks around it, then the exit."""
        if self._finally:
            self._finally[-1].extend(preds)
        else:
            self._link(preds, EXIT)

    def _link(self, froms: Iterable[int], to: int) -> None:
        for f in froms:
            self.succ.setdefault(f, set()).add(to)
            self.pred.setdefault(to, set()).add(f)

    def _chain(self, preds: set[int], idx: int) -> set[int]:
        self._link(preds, idx)
        return {idx}

    def _expr(self, expr: ast.AST | None, preds: set[int]) -> set[int]:
        """Events of an expression in evaluation order; short circuits branch."""
        if expr is None:
            return preds
        if isinstance(expr, (ast.Lambda,)):
            return preds
        if isinstance(expr, ast.Call):
            preds = self._expr(expr.func, preds)
            for a in expr.args:
                preds = self._expr(a, preds)
            for k in expr.keywords:
                preds = self._expr(k.value, preds)
            idx = self._new("call", expr)
            self.by_call[id(expr)] = idx
            return self._chain(preds, idx)
        if isinstance(expr, ast.BoolOp):
            # `a or b` leaves after `a` when `a` is true, and reads `b` when it is false (`and`
            # the other way round): each way is a branch, whose condition a search can decide
            # (`if not reuse or compact(rows):` compacts wherever reuse is on)
            leaves_when = isinstance(expr.op, ast.Or)
            preds = self._expr(expr.values[0], preds)
            out: set[int] = set()
            for prev, value in zip(expr.values, expr.values[1:]):
                out |= self._branch(prev, leaves_when, preds)
                preds = self._expr(value, self._branch(prev, not leaves_when, preds))
            return out | preds
        if isinstance(expr, ast.IfExp):
            preds = self._expr(expr.test, preds)
            return self._expr(expr.body, preds) | self._expr(expr.orelse, preds)
        if isinstance(expr, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            # the first iterable runs once; the rest may run any number of times
            gens = expr.generators
            preds = self._expr(gens[0].iter, preds)
            head = self._new("join", expr)
            self._link(preds, head)
            cur = {head}
            for i, gen in enumerate(gens):
                if i:
                    cur = self._expr(gen.iter, cur)
                for cond in gen.ifs:
                    cur = self._expr(cond, cur)
            parts = [expr.key, expr.value] if isinstance(expr, ast.DictComp) else [expr.elt]
            for part in parts:
                cur = self._expr(part, cur)
            self._link(cur, head)
            return {head}
        if isinstance(expr, (ast.Yield, ast.YieldFrom)):
            preds = self._expr(expr.value, preds)
            # a generator hands control back here (a `@contextmanager`'s `with` block runs)
            return self._chain(preds, self._new("yield", expr))
        if isinstance(expr, ast.NamedExpr):
            preds = self._expr(expr.value, preds)
            return self._chain(preds, self._new("bind", expr, expr.target.id))
        for child in child_nodes(expr):
            if isinstance(child, ast.expr):
                preds = self._expr(child, preds)
        return preds

    def _bind_targets(self, target: ast.AST, stmt: ast.AST, preds: set[int]) -> set[int]:
        for name in target_names(target):
            preds = self._chain(preds, self._new("bind", stmt, name))
        # subscript/attribute targets evaluate their parts
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            preds = self._expr(target, preds)
        return preds

    def _block(self, stmts: list[ast.stmt], preds: set[int]) -> set[int]:
        for st in stmts:
            if not preds:
                break  # unreachable after return/raise/break/continue
            preds = self._stmt(st, preds)
        return preds

    def _branch(self, test: ast.AST, polarity: bool, preds: set[int]) -> set[int]:
        atoms = atoms_of(test, polarity)
        idx = self._new("cond", test, atoms=atoms)
        self._link(preds, idx)
        return {idx}

    def _stmt(self, st: ast.stmt, preds: set[int]) -> set[int]:
        if isinstance(st, (*FUNCS, ast.ClassDef)):
            for d in st.decorator_list:
                preds = self._expr(d, preds)
            return self._chain(preds, self._new("bind", st, st.name))
        if isinstance(st, ast.Expr):
            return self._expr(st.value, preds)
        if isinstance(st, ast.Assign):
            preds = self._expr(st.value, preds)
            for t in st.targets:
                preds = self._bind_targets(t, st, preds)
            return preds
        if isinstance(st, (ast.AnnAssign, ast.AugAssign)):
            preds = self._expr(st.value, preds)
            return self._bind_targets(st.target, st, preds)
        if isinstance(st, ast.Return):
            preds = self._expr(st.value, preds)
            self._leave(preds)
            return set()
        if isinstance(st, ast.Raise):
            self._expr(st.exc, preds)
            return set()  # an aborted run: no later step follows on this path
        if isinstance(st, ast.If):
            preds = self._expr(st.test, preds)
            ends: set[int] = set()
            for polarity, body in ((True, st.body), (False, st.orelse)):
                atoms = atoms_of(st.test, polarity)
                start = self._branch(st.test, polarity, preds)
                self._conds.extend(atoms)
                ends |= self._block(body, start)
                del self._conds[len(self._conds) - len(atoms) :]
            return ends
        if isinstance(st, (ast.For, ast.AsyncFor)):
            preds = self._expr(st.iter, preds)
            return self._loop(st, preds, target=st.target)
        if isinstance(st, ast.While):
            return self._loop(st, preds, test=st.test)
        if isinstance(st, (ast.With, ast.AsyncWith)):
            for item in st.items:
                preds = self._expr(item.context_expr, preds)
                if item.optional_vars is not None:
                    preds = self._bind_targets(item.optional_vars, st, preds)
            preds = self._block(st.body, preds)
            for item in reversed(st.items):
                # the context manager's `__exit__` runs when the block is left normally
                preds = self._chain(preds, self._new("exit", item.context_expr))
            return preds
        if isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            start = set(preds)
            before = len(self.nodes)
            if st.finalbody:
                self._finally.append([])  # the `return`s that leave through the `finally` block
            body_end = self._block(st.body, preds)
            inside = set(range(before, len(self.nodes))) | start
            ends = self._block(st.orelse, body_end) if st.orelse else body_end
            for handler in st.handlers:
                hp = set(inside)
                if handler.type is not None:
                    hp = self._expr(handler.type, hp)
                if handler.name:
                    hp = self._chain(hp, self._new("bind", handler, handler.name))
                ends |= self._block(handler.body, hp)
            if st.finalbody:
                returns = self._finally.pop()
                # copies of the block, the normal path's built last so that the events of the
                # block's calls are its own (where there is one)
                if not st.handlers:
                    # an exception in the body runs the `finally` block and leaves: on that
                    # path no later step follows
                    self._block(st.finalbody, inside)
                if returns:
                    # a `return` in the body runs the block, then leaves the function
                    self._leave(self._block(st.finalbody, set(returns)))
                if st.handlers:
                    ends = self._block(st.finalbody, ends | inside)
                elif ends or not returns:
                    ends = self._block(st.finalbody, ends)
            return ends
        if isinstance(st, ast.Break):
            if self._breaks:
                self._breaks[-1].extend(preds)
            return set()
        if isinstance(st, ast.Continue):
            if self._continues:
                self._continues[-1].extend(preds)
            return set()
        if type(st).__name__ == "Match":
            preds = self._expr(st.subject, preds)
            ends: set[int] = set()
            for case in st.cases:
                cp = set(preds)
                for name in pattern_names(case.pattern):
                    cp = self._chain(cp, self._new("bind", case, name))
                if case.guard is not None:
                    cp = self._expr(case.guard, cp)
                ends |= self._block(case.body, cp)
            # no case matched: not after an irrefutable last case (`case _:`, `case x:`)
            last = st.cases[-1] if st.cases else None
            if last is not None and last.guard is None and type(last.pattern).__name__ == "MatchAs" and last.pattern.pattern is None:
                return ends
            return ends | preds
        if isinstance(st, (ast.Delete,)):
            for t in st.targets:
                for name in target_names(t):
                    preds = self._chain(preds, self._new("bind", st, name))
            return preds
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            for alias in st.names:
                name = (alias.asname or alias.name).split(".")[0]
                if name != "*":
                    preds = self._chain(preds, self._new("bind", st, name))
            return preds
        if isinstance(st, ast.Assert):
            preds = self._expr(st.test, preds)
            atoms = atoms_of(st.test, True)
            ok = self._new("cond", st.test, atoms=atoms)
            self._link(preds, ok)
            return {ok}
        for child in child_nodes(st):
            if isinstance(child, ast.expr):
                preds = self._expr(child, preds)
        return preds

    def _loop(self, st: ast.AST, preds: set[int], *, target: ast.AST | None = None, test: ast.AST | None = None) -> set[int]:
        loop_id = len(self.loops)
        loop = Loop(loop_id, st, -1, set())
        self.loops.append(loop)
        self._loops.append(loop_id)
        loop.head = self._new("join", st)
        self._link(preds, loop.head)
        self._breaks.append([])
        self._continues.append([])
        body_preds = {loop.head}
        atoms: tuple[Atom, ...] = ()
        if test is not None:
            after_test = self._expr(test, body_preds)
            exits = self._branch(test, False, after_test)
            body_preds = self._branch(test, True, after_test)
            atoms = atoms_of(test, True)
            self._conds.extend(atoms)
        else:
            exits = {loop.head}
        if target is not None:
            body_preds = self._bind_targets(target, st, body_preds)
        body_end = self._block(st.body, body_preds)
        if atoms:
            del self._conds[len(self._conds) - len(atoms) :]
        self._link(body_end, loop.head)
        self._link(self._continues.pop(), loop.head)
        breaks = self._breaks.pop()
        self._loops.pop()
        ends = set(exits)
        if getattr(st, "orelse", None):
            ends = self._block(st.orelse, ends)
        return ends | set(breaks)

    # -- queries ---------------------------------------------------------------------------
    def stable(self, atom: Atom) -> bool:
        """Whether an atom means the same wherever it is read in this function."""
        try:
            expr = ast.parse(atom[0], mode="eval").body
        except SyntaxError:
            return False
        for node in ast.walk(expr):
            if isinstance(node, ast.Name) and node.id in self.assigned:
                return False
            if isinstance(node, ast.Attribute):
                r = ref(node)
                if r is not None and r in self.assigned:
                    return False
        return True

    def known_at(self, idx: int, fixed: bool = False) -> dict[str, bool]:
        """The stable atoms that hold at node `idx` (from the branches around it); with
        `fixed`, also those that read fixed locals as plain values."""
        return {a: p for a, p in self.nodes[idx].conds if a and (self.stable((a, p)) or fixed and self.stable_fixed(a))}

    def stable_fixed(self, source: str) -> bool:
        """Whether an atom means the same wherever the names it reads are bound: every name
        it assigns is a fixed local read as a plain value (not `x.attr`, `x[i]`, `x()`, which
        may change while `x` does not)."""
        try:
            expr = ast.parse(source, mode="eval").body
        except SyntaxError:
            return False
        inner = set()
        for node in ast.walk(expr):
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                inner.add(id(node.value))
            elif isinstance(node, ast.Call):
                inner.add(id(node.func))
                if isinstance(node.func, ast.Attribute):
                    inner.add(id(node.func.value))
        for node in ast.walk(expr):
            if isinstance(node, ast.Name) and node.id in self.assigned:
                if node.id not in self.fixed or id(node) in inner:
                    return False
            elif isinstance(node, ast.Attribute):
                r = ref(node)
                if r is not None and r in self.assigned:
                    return False
        return True

    def empty(self, atom: Atom) -> bool:
        """Whether taking a branch with this atom asserts a size of zero (nothing to act on)."""
        try:
            expr = ast.parse(atom[0], mode="eval").body
        except SyntaxError:
            return False
        return asserts_empty(expr, atom[1], self.sizes)

    def search(
        self,
        start: int,
        forward: bool,
        stop: Callable[[Node], str | None],
        known: dict[str, bool] | None = None,
        assume: Callable[[Atom], bool | None] | None = None,
    ) -> dict[str, list[list[int]]]:
        """Walk every path from `start` (excluded) in one direction. `stop(node)` ends a path
        with a verdict ('hit', 'block', ...) or lets it go on (None). Returns, per verdict, the
        paths that ended so (as node lists); the ends of the function are verdict 'end'.

        A `cond` node whose atoms contradict `known` (or what `assume` says of an atom) is not
        taken, nor, walking backwards, a node inside a branch whose conditions contradict it;
        nor a branch that contradicts a stable atom an earlier branch of the same path
        decided. Each node is visited once per search and set of decided atoms (paths
        through a loop are cut at the second visit, which cannot add a new verdict).
        """
        known = dict(known or {})
        edges = self.succ if forward else self.pred
        out: dict[str, list[list[int]]] = {}
        # a path carries the stable atoms its branches decided (`if self.share: compact()`
        # skipped means `self.share` is false further on), so a later branch that contradicts
        # them is not taken: `if not self.share: return` before the switch
        none: frozenset = frozenset()
        seen: set[tuple[int, frozenset]] = set()
        stack: list[tuple[int, list[int], frozenset]] = [(n, [n], none) for n in sorted(edges.get(start, ()))]
        while stack:
            idx, path, learned = stack.pop()
            if (idx, learned) in seen:
                continue
            seen.add((idx, learned))
            if idx in (ENTRY, EXIT):
                out.setdefault("end", []).append(path)
                continue
            node = self.nodes[idx]
            here = {**known, **dict(learned)} if learned else known
            if node.kind == "cond" and not _consistent(node.atoms, here, assume):
                continue
            if not forward and node.conds and not _consistent(node.conds, here, assume):
                continue  # walking back into a branch that is not taken
            verdict = stop(node)
            if verdict is not None:
                out.setdefault(verdict, []).append(path)
                continue
            decided = node.atoms if node.kind == "cond" else ()
            if not forward:
                decided = decided + node.conds
            if decided and len(learned) < _MAX_DECIDED:
                new = [a for a in decided if a[0] and a[0] not in here and self._stable_atom(a)]
                if new:
                    learned = learned | frozenset(new[: _MAX_DECIDED - len(learned)])
            for nxt in sorted(edges.get(idx, ())):
                if (nxt, learned) not in seen:
                    stack.append((nxt, path + [nxt], learned))
        return out

    def _stable_atom(self, atom: Atom) -> bool:
        got = self._stable_memo.get(atom[0])
        if got is None:
            got = self._stable_memo[atom[0]] = self.stable(atom)
        return got

    def iteration(self, loop: Loop, stop: Callable[[Node], str | None]) -> set[str]:
        """The verdicts of the paths through one iteration of `loop`, from its head back to
        it or out of it: what `stop` says where it ends a path, 'out' where a path gets back
        to the head or leaves the loop without a verdict, 'end' where it leaves the function."""
        head = loop.head

        def bounded(node: Node) -> str | None:
            if node.index == head or node.index not in loop.members:
                return "out"
            return stop(node)

        out: set[str] = set()
        for verdict, paths in self.search(head, True, bounded).items():
            if any(len(p) > 1 or p[0] in loop.members for p in paths):
                out.add(verdict)  # not straight out of the head (no iteration)
        return out

    def loop_at(self, idx: int) -> Loop | None:
        """The loop whose head is node `idx`."""
        for loop in self.loops:
            if loop.head == idx:
                return loop
        return None

    def loops_of(self, idx: int) -> list[Loop]:
        return [self.loops[i] for i in self.nodes[idx].loops]

    def calls(self) -> Iterator[Node]:
        return (n for n in self.nodes if n.kind == "call")


_MAX_DECIDED = 6  # atoms a path carries: enough for the guards one window holds


def _consistent(atoms: tuple[Atom, ...], known: dict[str, bool], assume) -> bool:
    for source, polarity in atoms:
        if source in known and known[source] != polarity:
            return False
        if assume is not None:
            fixed = assume((source, polarity))
            if fixed is not None and fixed != polarity:
                return False
        if _CONSTANT_TESTS.get(source, polarity) != polarity:
            return False  # `if True:` is never left by its `else`
        junction = _JUNCTIONS.get(source)
        if junction is not None:
            is_and, operands = junction
            # `a and b` is false only where some operand is; `a or b` true where some is
            if polarity != is_and and all(_decided(group, known, assume) for group in operands):
                return False
    return True


def _decided(atoms: tuple[Atom, ...], known: dict[str, bool], assume) -> bool:
    """Every atom holds with its polarity, by `known` or by what `assume` says."""
    for source, polarity in atoms:
        if known.get(source) == polarity:
            continue
        if assume is not None and assume((source, polarity)) == polarity:
            continue
        return False
    return True


def _assigned_names(func: ast.AST) -> set[str]:
    """Names and attribute refs (`self.x`) bound anywhere in the function's own scope."""
    out: set[str] = set()
    from .facts import walk_local

    for node in walk_local(func):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
        elif isinstance(node, ast.NamedExpr):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    out.add(sub.id)
                elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                    r = ref(sub)
                    if r:
                        out.add(r)
    return out


# -- sizes and fixed locals ------------------------------------------------------------------


_COUNT_PREFIXES = ("num_", "n_")
_COUNT_SUFFIXES = ("_size", "_count", "_len", "_numel")


def is_size(expr: ast.AST, sizes: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether `expr` is the size of something: `len(x)`, `x.numel()`, `x.nelement()`,
    `x.shape[k]`, `x.size(k)`, `x.size()[k]`, a local bound only to sizes (`sizes`), or a
    name that says it counts (`num_reqs`, `n_rows`, `batch_size`, `row_count`)."""
    if isinstance(expr, ast.Call):
        f = expr.func
        if isinstance(f, ast.Name) and f.id == "len" and len(expr.args) == 1:
            return True
        if isinstance(f, ast.Attribute) and f.attr in ("numel", "nelement") and not expr.args:
            return True
        return isinstance(f, ast.Attribute) and f.attr == "size" and len(expr.args) == 1
    if isinstance(expr, ast.Subscript):
        v = expr.value
        if isinstance(v, ast.Attribute) and v.attr == "shape":
            return True
        return isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "size" and not v.args
    name = expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else None
    if name is None:
        return False
    if isinstance(expr, ast.Name) and name in sizes:
        return True
    bare = name.lstrip("_")
    return bare.startswith(_COUNT_PREFIXES) or bare.endswith(_COUNT_SUFFIXES)


def asserts_empty(expr: ast.AST, polarity: bool, sizes: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether `expr` having truth value `polarity` means a size is zero: `size == 0`,
    `size < 1`, `size <= 0` true; `size != 0`, `size > 0`, `size >= 1` or `size` itself false."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        return asserts_empty(expr.operand, not polarity, sizes)
    if isinstance(expr, ast.BoolOp):
        parts = [asserts_empty(v, polarity, sizes) for v in expr.values]
        # `a and b` true / `a or b` false: each holds, one empty is enough; else each must be
        conjunction = isinstance(expr.op, ast.And) == polarity
        return any(parts) if conjunction else all(parts)
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
        left, op, right = expr.left, expr.ops[0], expr.comparators[0]
        flip = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
        if _int_const(left) is not None and _int_const(right) is None:
            left, right = right, left
            op = flip.get(type(op), type(op))()
        k = _int_const(right)
        if k is None or not is_size(left, sizes):
            return False
        means_empty = (
            isinstance(op, ast.Eq) and k == 0 or isinstance(op, ast.Lt) and k == 1 or isinstance(op, ast.LtE) and k == 0
        )
        means_some = (
            isinstance(op, ast.NotEq) and k == 0 or isinstance(op, ast.Gt) and k == 0 or isinstance(op, ast.GtE) and k == 1
        )
        return means_empty and polarity or means_some and not polarity
    return not polarity and is_size(expr, sizes)


def _int_const(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _fixed_locals(func: ast.AST) -> tuple[set[str], set[str]]:
    """(fixed, sizes): the names bound exactly once in the function's own scope, by a plain
    assignment outside any loop, and not parameters; and the locals every binding of which is
    a size (`n = idx.numel()`, `m = n`)."""
    from .facts import walk_local

    counts: dict[str, int] = {}
    values: dict[str, list[ast.AST | None]] = {}
    in_loop: set[str] = set()
    params: set[str] = set()
    if isinstance(func, FUNCS):
        a = func.args
        params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        params |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}

    def note(name: str, value: ast.AST | None, looped: bool) -> None:
        counts[name] = counts.get(name, 0) + 1
        values.setdefault(name, []).append(value)
        if looped:
            in_loop.add(name)

    loops: list[ast.AST] = [n for n in walk_local(func) if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]
    looped_ids = {id(sub) for loop in loops for stmt in loop.body + loop.orelse for sub in ast.walk(stmt)}
    for node in walk_local(func):
        looped = id(node) in looped_ids
        if isinstance(node, ast.Assign):
            for t in node.targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                        note(sub.id, node.value if t is sub else None, looped)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            for sub in ast.walk(node.target):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    note(sub.id, node.value if isinstance(node, ast.AnnAssign) and node.target is sub else None, looped)
                    if isinstance(node, ast.AugAssign):
                        counts[sub.id] += 1
        elif isinstance(node, ast.NamedExpr):
            note(node.target.id, node.value, looped)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.With, ast.AsyncWith, ast.Delete,
                               ast.Import, ast.ImportFrom, ast.ExceptHandler, ast.Global, ast.Nonlocal)):
            targets: list[ast.AST] = []
            if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                targets = [node.target]
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Name):
                        note(sub.id, None, True)
                        counts[sub.id] += 1
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    note((alias.asname or alias.name).split(".")[0], None, looped)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                note(node.name, None, True)
                counts[node.name] += 1
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                for name in node.names:
                    note(name, None, True)
                    counts[name] += 1
    fixed = {n for n, c in counts.items() if c == 1 and n not in in_loop and n not in params and values[n][0] is not None}
    sizes: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, vals in values.items():
            if name in sizes or name in params or not vals:
                continue
            if all(v is not None and is_size(v, sizes) for v in vals):
                sizes.add(name)
                changed = True
    return fixed, sizes
