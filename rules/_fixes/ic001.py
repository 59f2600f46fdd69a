"""IC001's fix: the check made over every entry.

vLLM 0.20.0 (PR #37887) fixed 0.18.0/0.19.0 this way: the per-group values kept in a
collection, a validation over all of them (`for group_md in per_group_attn_metadata:` with
the `isinstance` check inside) and the tree-attention dispatch over any of them
(`any(isinstance(md, TreeAttentionMetadata) for md in per_group_attn_metadata)`).

- The loop stores the value into a collection (`d[key] = value`, `lst.append(value)`), or the
  check picks one entry of one (`list(d.values())[-1]`, `next(iter(d.values()))`): the check
  expression is rewritten over every entry, `all(...)` where a validation must hold for each
  (`any(...)` where it raises on one), `any(...)` for a dispatch, as vLLM did; a validating
  helper is called for each entry.
- Otherwise a validation (an `assert`, or an `if` that only raises) moves into the loop,
  right after the statement that binds the value.

No fix for a dispatch without a collection (which group decides is a design question), for a
`match` on the type (its cases are written for one value), for a check whose text cannot be
rewritten in place, or when the names the check reads are bound
between the loop and the check (they would not exist inside the loop).
"""

from __future__ import annotations

import ast
import re

from invariant_check.analysis.facts import ref, walk_local
from invariant_check.analysis.values import OneEntry, Produced
from invariant_check.api.edits import WIDTH, Editor, block_of, fresh_name, parents_of, reindent
from invariant_check.api.types import UNSAFE, Edit, Fix


def build(rule, report, view) -> Fix | None:
    found = _finding_at(view, report.node)
    if found is not None and found.check.kind == "match":
        return None  # a `match` on the type: its cases say what each type does, per group
    if found is None or any(isinstance(sub, ast.NamedExpr) for sub in ast.walk(found.check.node)):
        return None  # (a walrus binds the picked entry: its text cannot be rewritten in place)
    if isinstance(found.origin, Produced) and not isinstance(found.origin.loop, (ast.For, ast.AsyncFor, ast.While)):
        return None  # left behind by a comprehension's walrus: no loop body to move into
    ed = Editor(view.source)
    func = view.node
    entry = fresh_name(func, ["md", "group_md", "entry_md"])
    over = _entries(ed, func, found)
    if over is not None:
        iterable, replaced = over
        return _rewrite(ed, func, found, iterable, replaced, entry)
    if isinstance(found.origin, Produced) and found.check.validates:
        return _move_into_loop(ed, func, found)
    return None


def _finding_at(view, node: ast.AST):
    """The rule's value finding for the reported node (the check is found again, with a
    validator that accepts exactly the reported call)."""
    for found in view.last_values(lambda call, pos, names: call is node):
        if found.check.node is node:
            return found
    return None


# -- what the entries are --------------------------------------------------------------------------


def _entries(ed: Editor, func: ast.AST, found) -> tuple[str, list[ast.AST]] | None:
    """(the iterable of every entry, the nodes of the check that stand for one entry)."""
    check = found.check
    origin = found.origin
    if isinstance(origin, OneEntry):
        iterable = _iterable_around(ed, func, origin.collection_node)
        if found.via:  # `first = next(iter(d.values()))`, then a check of `first`
            return iterable, _name_nodes(check.node, found.via)
        pick = _pick_node(check)
        return (iterable, [pick]) if pick is not None else None
    loop = origin.loop
    subject = check.subject
    # a collection subscripted by the loop's variable after the loop: `per_layer[name]`
    if isinstance(subject, ast.Subscript) and isinstance(loop, (ast.For, ast.AsyncFor)):
        coll = ref(subject.value)
        if coll and _loop_var_index(subject, loop):
            return _dict_or_list(func, coll), [subject]
    stored = _collection_of(loop, found.name)
    if stored is None:
        return None
    coll, kind = stored
    iterable = coll if kind == "list" else _dict_or_list(func, coll)
    return iterable, _name_nodes(check.node, found.name)


def _pick_node(check) -> ast.AST | None:
    from invariant_check.analysis.values import entry_shape  # the rule's own notion of a pick

    for sub in ast.walk(check.node):
        if entry_shape(sub) is not None:
            return sub
    return None


def _iterable_around(ed: Editor, func: ast.AST, coll: ast.AST) -> str:
    """Every entry of the collection a pick was taken from: `d.values()` for a dict read
    through `.values()` or by a key (`d[names[-1]]`), else the collection itself."""
    text = ed.node_text(coll)
    parent = parents_of(func).get(id(coll))
    if isinstance(parent, ast.Attribute) and parent.attr in ("values", "items", "keys"):
        return f"{text}.values()"
    if isinstance(parent, ast.Subscript) and parent.value is coll and not _is_minus_one(parent.slice):
        return f"{text}.values()"
    return text


def _is_minus_one(node: ast.AST) -> bool:
    return isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) and node.operand.value == 1


def _loop_var_index(subject: ast.Subscript, loop: ast.AST) -> bool:
    targets = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    return isinstance(subject.slice, ast.Name) and subject.slice.id in targets


def _collection_of(loop: ast.AST, name: str) -> tuple[str, str] | None:
    """(collection, 'dict' or 'list') the loop body stores `name` into."""
    for node in ast.walk(loop):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id == name:
            for t in node.targets:
                if isinstance(t, ast.Subscript) and ref(t.value):
                    return ref(t.value), "dict"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == name
            and ref(node.func.value)
        ):
            return ref(node.func.value), "list"
    return None


def _dict_or_list(func: ast.AST, coll: str) -> str:
    """`coll.values()` unless the function makes `coll` a list."""
    for sub in walk_local(func):
        if isinstance(sub, (ast.Assign, ast.AnnAssign)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            if any(ref(t) == coll for t in targets) and sub.value is not None:
                v = sub.value
                if isinstance(v, (ast.List, ast.ListComp)) or (isinstance(v, ast.Call) and ref(v.func) == "list"):
                    return coll
    return f"{coll}.values()"


def _name_nodes(root: ast.AST, name: str) -> list[ast.AST]:
    return [n for n in ast.walk(root) if ref(n) == name and isinstance(n, (ast.Name, ast.Attribute))]


# -- rewriting the check over every entry ---------------------------------------------------------------


def _rewrite(ed: Editor, func: ast.AST, found, iterable: str, replaced: list[ast.AST], entry: str) -> Fix | None:
    check = found.check
    if not replaced:
        return None
    if check.kind == "helper":
        return _helper_per_entry(ed, func, found, iterable, replaced, entry)
    target = check.node
    parents = parents_of(func)
    if check.kind == "type" and ref(getattr(target, "func", None)) == "type":
        parent = parents.get(id(target))
        if not isinstance(parent, ast.Compare):
            return None
        target = parent  # `type(x) is T`: the comparison is the check
    per_entry = _raise_per_entry(ed, func, found, iterable, entry)
    if per_entry is not None:
        return per_entry
    inner = _substituted(ed, target, replaced, entry)
    if inner is None:
        return None
    quantifier = _quantifier(found, target, parents)
    text = one_line = f"{quantifier}({inner} for {entry} in {iterable})"
    (l1, c1), (l2, c2) = ed.start(target), ed.end(target)
    head, tail = ed.line(l1)[: c1 - 1], ed.line(l2)[c2 - 1 :]
    if l1 != l2 or len(head) + len(text) + len(tail) > WIDTH:
        # over lines, as the original check was or as a formatter would write it
        indent = head[: len(head) - len(head.lstrip())]
        text = f"{quantifier}(\n{indent}    {inner}\n{indent}    for {entry} in {iterable}\n{indent})"
    what = "every entry" if quantifier == "all" else "any entry"
    return Fix(UNSAFE, f"Check {what} of `{iterable}`: `{_short(one_line)}`", (ed.replace(target, text),))


def _raise_per_entry(ed: Editor, func: ast.AST, found, iterable: str, entry: str) -> Fix | None:
    """An `if` that only raises and names the checked value in its message (`type(md)`):
    the whole statement runs for each entry, so the error names the entry that failed, as
    vLLM 0.20.0 writes it (`for group_md in per_group_attn_metadata: if ...: raise`)."""
    stmt = found.check.statement
    if not isinstance(stmt, ast.If) or stmt.orelse or not all(isinstance(s, ast.Raise) for s in stmt.body):
        return None
    if isinstance(found.origin, OneEntry) or found.via:
        return None  # the value is a pick, not a name the loop binds
    in_message = [n for s in stmt.body for n in _name_nodes(s, found.name)]
    if not in_message:
        return None
    indent = ed.indent_of(stmt)
    if indent is None or not ed.ends_its_line(stmt):
        return None
    if any(isinstance(n, (ast.Constant, ast.JoinedStr)) and "\n" in ed.node_text(n) and '"""' in ed.node_text(n) for n in ast.walk(stmt)):
        return None  # a string over lines: its lines cannot move
    text = _substituted(ed, stmt, _name_nodes(stmt, found.name), entry, keep_lines=True)
    if text is None:
        return None
    body = "\n".join(["    " + text.split("\n")[0]] + ["    " + l if l.strip() else l for l in text.split("\n")[1:]])
    (l1, c1), (l2, c2) = ed.start(stmt), ed.end(stmt)
    new = f"for {entry} in {iterable}:\n{indent}{body}"
    return Fix(
        UNSAFE,
        f"Check every entry of `{iterable}`, naming the one that fails: `for {entry} in {iterable}: ...`",
        (Edit(l1, c1, l2, c2, new),),
    )


def _quantifier(found, target: ast.AST, parents) -> str:
    """`all` where the check must hold for every entry, `any` where one entry raising is
    enough, `any` for a dispatch (vLLM 0.20.0's tree-attention test)."""
    if not found.check.validates:
        return "any"
    stmt = found.check.statement
    negations = 0
    cur = parents.get(id(target))
    while cur is not None and cur is not stmt:
        if isinstance(cur, ast.UnaryOp) and isinstance(cur.op, ast.Not):
            negations += 1
        cur = parents.get(id(cur))
    raises_when_true = not isinstance(stmt, ast.Assert)
    if negations % 2:
        raises_when_true = not raises_when_true
    return "any" if raises_when_true else "all"


def _helper_per_entry(ed: Editor, func: ast.AST, found, iterable: str, replaced, entry: str) -> Fix | None:
    stmt = found.check.statement
    if not isinstance(stmt, ast.Expr) or stmt.value is not found.check.node:
        return None
    indent = ed.indent_of(stmt)
    if indent is None or not ed.ends_its_line(stmt):
        return None
    call = _substituted(ed, stmt.value, replaced, entry)
    if call is None:
        return None
    new = reindent(f"for {entry} in {iterable}:\n    {call}", indent).rstrip("\n")
    (l1, _), (l2, c2) = ed.start(stmt), ed.end(stmt)
    return Fix(UNSAFE, f"Validate every entry of `{iterable}`", (Edit(l1, 1, l2, c2, new),))


def _substituted(ed: Editor, node: ast.AST, replaced: list[ast.AST], entry: str, keep_lines: bool = False) -> str | None:
    """The source of `node` with each of `replaced` (nodes inside it) spelled `entry`."""
    text = ed.node_text(node)
    start = ed.start(node)
    spans = []
    for r in replaced:
        (l1, c1), (l2, c2) = ed.start(r), ed.end(r)
        if (l1, c1) < start or (l2, c2) > ed.end(node):
            continue
        spans.append((_offset(ed, start, (l1, c1)), _offset(ed, start, (l2, c2))))
    if not spans:
        return None
    spans.sort()
    for (a1, b1), (a2, _) in zip(spans, spans[1:]):
        if a2 < b1:
            return None  # nested: one inside another
    for a, b in reversed(spans):
        text = text[:a] + entry + text[b:]
    if "\n" in text and not keep_lines and not any(isinstance(n, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(n, "value", ""), str) for n in ast.walk(node)):
        # one line, as the check reads: `isinstance(md, T)`, not the wrapped original
        text = re.sub(r",?\s+([)\]}])", r"\1", re.sub(r"([(\[{])\s+", r"\1", " ".join(text.split())))
    return text


def _offset(ed: Editor, start: tuple[int, int], pos: tuple[int, int]) -> int:
    return len(ed.text_between(start, pos))


def _short(text: str) -> str:
    return text if len(text) <= 90 else text[:87] + "..."


# -- moving a validation into the loop ----------------------------------------------------------------


def _move_into_loop(ed: Editor, func: ast.AST, found) -> Fix | None:
    stmt = found.check.statement
    loop = found.origin.loop
    if isinstance(stmt, ast.If):
        if stmt.orelse or not all(isinstance(s, ast.Raise) for s in stmt.body):
            return None
    elif not isinstance(stmt, ast.Assert) and not (isinstance(stmt, ast.Expr) and stmt.value is found.check.node):
        return None  # an assert, an `if` that raises, or a validating helper called on its own
    here = block_of(func, stmt)
    there = block_of(func, loop)
    if here is None or there is None or here[0] is not there[0] or here[1] <= there[1] or len(here[0]) < 2:
        return None  # the check must follow the loop in the same block, which keeps a statement
    block, i = here
    between = block[there[1] + 1 : i]
    reads = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    bound_between = {n.id for s in between for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if reads & bound_between:
        return None
    if ed.indent_of(stmt) is None or not ed.ends_its_line(stmt):
        return None
    binder = _binding_statement(loop, found.name)
    anchor = binder if binder is not None else loop.body[-1]
    indent = ed.indent_of(anchor)
    if indent is None:
        return None
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    if last >= ed.line_count:
        return None
    source = "\n".join(ed.line(n) for n in range(first, last + 1))
    insert = ed.insert_after(anchor, source, indent)
    if insert is None:
        return None
    remove = Edit(first, 1, last + 1, 1, "")
    return Fix(UNSAFE, "Move the check into the loop, after each value is made", (insert, remove))


def _binding_statement(loop: ast.AST, name: str) -> ast.stmt | None:
    """The statement of the loop body (not nested) that binds `name`."""
    for s in loop.body:
        targets = []
        if isinstance(s, ast.Assign):
            targets = s.targets
        elif isinstance(s, (ast.AnnAssign, ast.AugAssign)):
            targets = [s.target]
        if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
            return s
    return None
