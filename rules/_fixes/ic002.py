"""IC002's fix: the compaction, called right after the switch on the switched model.

vLLM 0.25.0 fixed 0.24.0 this way: `self.model.model.compact_topk_indices(token_indices_to_sample)`
right after `self.model.model.set_skip_topk(True)`, under the switch's own condition, so that it
runs on exactly the paths that turn reuse on, after the step-0 forward and before the next one.

The rows are those of a compaction the function already makes in the wrong place (that call
is moved: a second gather would permute the rows again), else the sampled rows by the names
vLLM gives them (`token_indices_to_sample`, `last_token_indices`, a name holding
`token_indices`), bound before the switch. No fix when neither is there, when the switch
shares its line with other code, or when a misplaced compaction is not a statement of its
own in this function (a helper's: moving it would change the helper's other callers).
"""

from __future__ import annotations

import ast

from invariant_check.analysis.facts import last_name, ref, walk_local
from invariant_check.analysis.switch_paths import identity_rows, through_getattr
from invariant_check.api.edits import Editor, block_of, statement_holding
from invariant_check.api.types import UNSAFE, Edit, Fix

# the rows each request samples from, by the names vLLM's proposers give them
ROW_NAMES = ("token_indices_to_sample", "last_token_indices")


def build(rule, report, view) -> Fix | None:
    switch: ast.Call = report.node
    if not isinstance(switch, ast.Call):
        return None
    # `getattr(m, "set_skip_topk")(True)` switches `m`, as `m.set_skip_topk(True)` does
    made = through_getattr(switch) or switch
    if not isinstance(made.func, ast.Attribute) or made.func.attr != rule.switch:
        return None  # the switch bound to a name (`functools.partial`) and called elsewhere
    func = view.node
    stmt = statement_holding(func, switch)
    if not isinstance(stmt, ast.Expr) or stmt.value is not switch:
        return None  # the switch inside a larger statement: no place of its own to follow
    ed = Editor(view.source)
    receiver = ed.node_text(made.func.value)
    if "\n" in receiver:
        return None
    bound = _bound_before(func, stmt)
    edits: list[Edit] = []
    # a compaction of rows `0..n-1` moves nothing: not a misplaced compaction to move (moved,
    # it would still gather each row onto itself)
    existing = [(c, w) for c, w in _compactions(func, rule.compaction, ref(made.func.value)) if not identity_rows(c, func)]
    if len(existing) > 1:
        return None
    if existing:
        call, where = existing[0]
        if where is None or len(call.args) != 1 or call.keywords:
            return None
        rows = ed.node_text(call.args[0])
        if "\n" in rows or not _names(call.args[0]) <= bound:
            return None
        removal = _remove_statement(ed, func, where)
        if removal is None:
            return None
        edits.append(removal)
        verb = "Move"
    else:
        if report.data and report.data.get("partial_compactions"):
            return None  # compacted on some paths by a helper: a second gather there would permute again
        rows = _rows_in_scope(bound)
        if rows is None:
            return None
        verb = "Call"
    call_text = f"{receiver}.{rule.compaction}({rows})"
    code = "# steps 1+ read one row per request: gather each request's row to the front\n" + call_text + "\n"
    insert = ed.insert_after(stmt, code)
    if insert is None:
        return None
    edits.append(insert)
    return Fix(UNSAFE, f"{verb} `{call_text}` to right after the switch" if verb == "Move" else f"Call `{call_text}` right after the switch", tuple(edits))


def _compactions(func: ast.AST, name: str, receiver: str | None) -> list[tuple[ast.Call, ast.stmt | None]]:
    """Calls of the compaction on the switched model (or an owner of it), each with its
    statement when it is a statement of its own."""
    out = []
    for sub in walk_local(func):
        if isinstance(sub, ast.Call) and last_name(sub.func) == name and isinstance(sub.func, ast.Attribute):
            recv = ref(sub.func.value)
            if receiver and recv and not (recv == receiver or recv.startswith(receiver + ".") or receiver.startswith(recv + ".")):
                continue
            stmt = statement_holding(func, sub)
            out.append((sub, stmt if isinstance(stmt, ast.Expr) and stmt.value is sub else None))
    return out


def _remove_statement(ed: Editor, func: ast.AST, stmt: ast.stmt) -> Edit | None:
    """Delete a statement's whole lines, when it has them to itself and its block keeps
    another statement."""
    found = block_of(func, stmt)
    if found is None or len(found[0]) < 2:
        return None
    if ed.indent_of(stmt) is None or not ed.ends_its_line(stmt):
        return None
    last = stmt.end_lineno or stmt.lineno
    if last >= ed.line_count:
        return None
    return Edit(stmt.lineno, 1, last + 1, 1, "")


def _bound_before(func: ast.AST, stmt: ast.stmt) -> set[str]:
    bound = {"self", "cls"}
    args = getattr(func, "args", None)
    if args is not None:
        bound |= {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        for extra in (args.vararg, args.kwarg):
            if extra is not None:
                bound.add(extra.arg)
    for sub in walk_local(func):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and sub.lineno < stmt.lineno:
            bound.add(sub.id)
    return bound


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _rows_in_scope(bound: set[str]) -> str | None:
    for preferred in ROW_NAMES:
        if preferred in bound:
            return preferred
    others = sorted(n for n in bound if "token_indices" in n)
    return others[0] if others else None
