"""What a function returns once a given statement of it has run: true, false, or cannot be
told. A hook that switches reuse on and says so (`set_skip_topk(True)`, then `return True`)
decides the branch its caller takes on it (`if self.on_multi_step_decode_begin(rows):
self.compact(rows)`).

Read on the statements' structure, not the flow graph: from the statement holding the node,
the rest of its block, then the rest of each enclosing `if`/`with` block, up to the end of
the function (where it returns `None`). A path that raises returns nothing and is left out.
Inside a loop, a `try` or a `match`, or past a statement whose returns cannot be told,
nothing is decided.
"""

from __future__ import annotations

import ast

from .facts import FUNCS

TRUE, FALSE, UNKNOWN = "true", "false", "unknown"


def truth_of(value: ast.AST | None) -> str:
    """The truth of a returned expression: `True`, `1`, `"x"` are true; `False`, `None`, `0`,
    `""` and a bare `return` are false; anything else cannot be told."""
    if value is None:
        return FALSE
    if isinstance(value, ast.Constant):
        return TRUE if value.value else FALSE
    return UNKNOWN


def _block_returns(body: list[ast.stmt]) -> tuple[set[str], bool]:
    """(the truths the block may return, whether it may run to its end)."""
    out: set[str] = set()
    for st in body:
        got, falls = _stmt_returns(st)
        out |= got
        if not falls:
            return out, False
    return out, True


def _stmt_returns(st: ast.stmt) -> tuple[set[str], bool]:
    if isinstance(st, ast.Return):
        return {truth_of(st.value)}, False
    if isinstance(st, ast.Raise):
        return set(), False
    if isinstance(st, ast.If):
        a, fa = _block_returns(st.body)
        b, fb = _block_returns(st.orelse)
        return a | b, fa or fb
    if isinstance(st, (ast.With, ast.AsyncWith)):
        return _block_returns(st.body)
    if isinstance(st, (*FUNCS, ast.ClassDef)):
        return set(), True
    if any(isinstance(sub, (ast.Return, ast.Yield, ast.YieldFrom)) for sub in _local(st)):
        return {UNKNOWN}, True  # a loop or `try` that may return: not read here
    return set(), True


def _local(node: ast.AST):
    stack = list(ast.iter_child_nodes(node))
    while stack:
        cur = stack.pop()
        yield cur
        if not isinstance(cur, (*FUNCS, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(cur))


def _path_to(body: list[ast.stmt], target: ast.AST) -> list[tuple[list[ast.stmt], int]] | None:
    """The blocks from `body` down to the statement holding `target`, each with the index of
    the statement taken in it; None when `target` is not under `body` or lies under a
    statement other than `if`/`with` (a loop, a `try`, a nested definition)."""
    for i, st in enumerate(body):
        if not (st.lineno <= target.lineno <= (st.end_lineno or st.lineno)):
            continue
        if st is target or any(sub is target for sub in _header(st)):
            return [(body, i)]
        if isinstance(st, ast.If):
            for block in (st.body, st.orelse):
                inner = _path_to(block, target)
                if inner is not None:
                    return [(body, i), *inner]
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            inner = _path_to(st.body, target)
            if inner is not None:
                return [(body, i), *inner]
        if not isinstance(st, (ast.If, ast.With, ast.AsyncWith)) and any(sub is target for sub in _local(st)):
            return None  # under a loop, a `try`, a `match` or a definition
    return None


def _header(st: ast.stmt):
    """The nodes of a statement that run before its blocks (an `if`'s test, a `with`'s
    items), or all of a simple statement."""
    if isinstance(st, ast.If):
        return _local(st.test)
    if isinstance(st, (ast.With, ast.AsyncWith)):
        return (n for item in st.items for n in _local(item))
    if isinstance(st, _COMPOUND) or type(st).__name__ in ("TryStar", "Match"):
        return ()  # a loop, a `try`, a definition: what runs in it is not read here
    return _local(st)


_COMPOUND = (ast.For, ast.AsyncFor, ast.While, ast.Try, *FUNCS, ast.ClassDef)


def returned_after(func: ast.AST, node: ast.AST) -> bool | None:
    """Whether `func` returns a true value on every path that runs `node` (True), a false one
    on every such path (False), or neither can be told (None)."""
    if not isinstance(func, FUNCS) or any(isinstance(s, (ast.Yield, ast.YieldFrom)) for s in _local(func)):
        return None  # a generator returns itself
    path = _path_to(func.body, node)
    if path is None:
        return None
    truths: set[str] = set()
    falls = True
    # the statement holding `node`, the rest of its block, then the rest of each block
    # around it (the enclosing `if`/`with` ran only the branch that holds it)
    for depth, (block, i) in enumerate(reversed(path)):
        if depth == 0:
            truths, falls = _simple_returns(block[i], node)
        if not falls:
            break
        got, falls = _block_returns(block[i + 1 :])
        truths |= got
    if falls:
        truths.add(FALSE)  # the end of the function: `None`
    if truths == {TRUE}:
        return True
    if truths == {FALSE}:
        return False
    return None


def _simple_returns(st: ast.stmt, node: ast.AST) -> tuple[set[str], bool]:
    """What the statement holding `node` returns itself, once `node` has run in it: a
    `return f(...)` returns the truth of its value; a statement with blocks (`if` test) runs
    one of them."""
    if isinstance(st, ast.Return):
        return {truth_of(st.value)}, False
    if isinstance(st, (ast.If, ast.With, ast.AsyncWith)):
        return _stmt_returns(st)
    return set(), True
