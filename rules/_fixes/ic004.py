"""IC004's fix: the stale derived fields advanced in the same step as `seq_lens`.

Modelled on vLLM 0.16.0 (PR #32312), which fixed 0.13.0's EAGLE draft loop by advancing
`max_seq_len` right after the lengths, capped as the loop caps the lengths:

    common_attn_metadata.seq_lens += 1
    common_attn_metadata.seq_lens.masked_fill_(exceeds_max_model_len, 1)
    common_attn_metadata.max_seq_len = min(common_attn_metadata.max_seq_len + 1, self.max_model_len)

- An advance in place (`X.seq_lens += k`, `.add_(k)`, `X.seq_lens = X.seq_lens + k`): update
  statements go right after it (after the statements that go on changing the same lengths,
  such as that `masked_fill_`), in its block, so on exactly its paths: `max_seq_len` advanced
  by `k` (with `min(..., cap)` when the function caps the lengths against `cap`), the CPU
  upper bound and the CPU shadow advanced by `k` when set (vLLM's own idiom: `+= 1` on
  `seq_lens`, `_seq_lens_cpu` and `seq_lens_cpu_upper_bound` together; invalidating the
  shadow instead would cost its readers a device-to-host copy).
- A copy (`replace(X, seq_lens=X.seq_lens + k, ...)`, `X.replace(...)`, a constructor given
  the old values): the derived fields join the same call, as keywords, each `X.f + k` when
  set. A copy that advances one CPU upper bound advances every other one the class declares
  (`dcp_local_seq_lens_cpu_upper_bound`: each rank stores at most `k` of the `k` new tokens).

No fix where the advance sits in a helper whose callers must finish the step (the update
belongs in those callers), or where a stale field is one the fix cannot compute
(`slot_mapping`, fields added in `derived-fields`).
"""

from __future__ import annotations

import ast
import re

from invariant_check.analysis.facts import last_name, ref, walk_local
from invariant_check.analysis.fields import ROWS_ADDED, VALUE_AT, class_fields, class_of, local_aliases, reads_field, value_argument
from invariant_check.api.edits import Editor, add_keywords, block_of, collapse, statement_holding, wrapped_call
from invariant_check.api.types import UNSAFE, Edit, Fix

_CAPPING_CALLS = frozenset({"masked_fill_", "clamp_", "clamp", "clip", "clip_", "minimum", "min"})
_KNOWN = ("max_seq_len", "seq_lens_cpu", "seq_lens_cpu_upper_bound")


def build(rule, report, view) -> Fix | None:
    data = report.data or {}
    stale = list(data.get("stale_fields") or [])
    memos = set(data.get("memos") or ())
    field = data.get("advanced")
    if field != "seq_lens" or not stale:
        return None
    # a field that must be recomputed from what the step does not have (`dcp_local_seq_lens`:
    # the DCP rank and world size) is left to the author; the fix says so
    left = [d for d in stale if not _known(d) and d not in memos]
    stale = [d for d in stale if d not in left]
    if not stale:
        return None
    func = view.node
    ed = Editor(view.source)
    node = report.node
    if isinstance(node, ast.keyword) or (isinstance(node, ast.Call) and any(kw.arg == field for kw in node.keywords)):
        fix = _in_the_copy(ed, func, node, field, stale, view, memos)
    elif data.get("callers"):
        return None  # the step goes on in the callers: the update belongs there
    elif len(data.get("changed") or [field]) > 1:
        return None  # several fields changed in place together: the reset follows the last of them
    else:
        fix = _after_the_advance(ed, func, node, field, stale, view, memos, set(data.get("cached_properties") or ()))
    if fix is None or not left:
        return fix
    return Fix(fix.applicability, fix.message + f" (not fixed: {', '.join(f'`{d}`' for d in left)}, recomputed from the new `{field}`)", fix.edits)


# -- an advance in place ----------------------------------------------------------------------------


def _after_the_advance(ed: Editor, func: ast.AST, node: ast.AST, field: str, stale: list[str], view,
                       memos: set[str] = frozenset(), cached: set[str] = frozenset()) -> Fix | None:
    target, amount = _advance_parts(node, field)
    if target is None or amount is None:
        return None
    stmt = statement_holding(func, node)
    if stmt is None or hasattr(stmt, "body"):
        return None  # the advance in the header of a compound statement
    x = ed.node_text(target)
    k = _wrap(ed.node_text(amount))
    if "\n" in x or "\n" in k:
        return None
    anchor = _last_change(func, stmt, field, x, ed)
    cap = _cap(func, field, ed)
    shadow = _shadow_name(view, func, x)
    indent = ed.indent_of(anchor) or ""
    lines = [f"# keep the fields derived from `{field}` in sync"]
    for d in stale:
        if d in cached:
            lines.append(f'{x}.__dict__.pop("{d}", None)')  # read again, the property recomputes it
        elif d in memos:
            lines.append(f"{x}.{d} = None")  # the memo's method fills it again from the new lengths
        elif d == "max_seq_len":
            if cap:
                lines += wrapped_call(f"{x}.max_seq_len = ", "min", [f"{x}.max_seq_len + {k}", cap], indent).split("\n")
            else:
                lines.append(f"{x}.max_seq_len += {k}")
        elif _plain(d) == "seq_lens_cpu":
            lines += [f"if {x}.{shadow} is not None:", f"    {x}.{shadow} += {k}"]
        else:
            lines += [f"if {x}.{d} is not None:", f"    {x}.{d} += {k}"]
    edit = ed.insert_after(anchor, "\n".join(lines) + "\n")
    if edit is None:
        return None
    names = ", ".join(f"`{d}`" for d in stale)
    verb = "Reset" if set(stale) <= memos else "Advance"
    return Fix(UNSAFE, f"{verb} {names} of `{x}` right after `{x}.{field}`", (edit,))


def _advance_parts(node: ast.AST, field: str) -> tuple[ast.AST | None, ast.AST | None]:
    """(the object whose field advances, the amount) of an advance statement or call."""
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
        return _object_of(node.target, field), node.value
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        obj = _object_of(node.targets[0], field)
        return obj, _added(node.value, field) if obj is not None else None
    if isinstance(node, ast.Call):
        func = node.func
        holder = func.value.value if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Subscript) else getattr(func, "value", None)
        if isinstance(holder, ast.Attribute) and holder.attr == field:
            if func.attr in ("add_", "add") and node.args:
                return holder.value, node.args[0]
            if func.attr in ROWS_ADDED:
                # `x.seq_lens.index_add_(0, idx, src)`: a tensor of amounts, one per row; a
                # bound would grow by its maximum, a read the step should not pay for
                return holder.value, None
            if func.attr in VALUE_AT:  # `x.seq_lens.index_copy_(0, idx, x.seq_lens[idx] + k)`
                value = value_argument(node, *VALUE_AT[func.attr])
                return holder.value, _added(value, field) if value is not None else None
        for kw in node.keywords:  # torch.add(x.seq_lens, k, out=x.seq_lens), torch.clamp(x.seq_lens + k, ..., out=...)
            if kw.arg == "out":
                obj = _object_of(kw.value, field)
                if obj is None:
                    continue
                for arg in node.args:
                    amount = _added(arg, field)
                    if amount is not None:
                        return obj, amount
                others = [a for a in node.args if not (ref(a) or "").endswith("." + field)]
                return obj, others[0] if others else None
    return None, None


def _object_of(target: ast.AST, field: str) -> ast.AST | None:
    if isinstance(target, ast.Subscript):
        target = target.value
    if isinstance(target, ast.Attribute) and target.attr == field:
        return target.value
    return None


def _added(value: ast.AST, field: str) -> ast.AST | None:
    """`k` in `X.field + k` (or `k + X.field`), also inside `min(...)`/`clamp(...)`."""
    for sub in ast.walk(value):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Add):
            if reads_field(sub.left, field):
                return sub.right
            if reads_field(sub.right, field):
                return sub.left
    return None


def _last_change(func: ast.AST, stmt: ast.stmt, field: str, x: str, ed: Editor) -> ast.stmt:
    """The advance, or the last of the statements right after it that go on changing the same
    lengths in place (`x.seq_lens.masked_fill_(...)`): the update follows them, as in 0.16.0."""
    found = block_of(func, stmt)
    if found is None:
        return stmt
    block, i = found
    anchor = stmt
    for nxt in block[i + 1 :]:
        call = nxt.value if isinstance(nxt, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Attribute):
            holder = call.func.value
            if holder.attr == field and ed.node_text(holder.value) == x and call.func.attr.endswith("_"):
                anchor = nxt
                continue
        break
    return anchor


def _cap(func: ast.AST, field: str, ed: Editor) -> str | None:
    """The bound the function caps the lengths with, as it spells it: the code caps
    `field` (a `min`/`clamp`/`masked_fill_` of it) and names a `max_model_len`."""
    caps_lengths = False
    bound = None
    for sub in walk_local(func):
        if isinstance(sub, ast.Call) and last_name(sub.func) in _CAPPING_CALLS:
            spelled = [sub.func.value] if isinstance(sub.func, ast.Attribute) else []
            if any(isinstance(n, ast.Attribute) and n.attr == field for a in spelled + list(sub.args) for n in ast.walk(a)):
                caps_lengths = True
        if bound is None and isinstance(sub, (ast.Attribute, ast.Name)) and (ref(sub) or "").rsplit(".", 1)[-1] == "max_model_len":
            if isinstance(getattr(sub, "ctx", None), ast.Load):
                bound = ed.node_text(sub)
    return bound if caps_lengths else None


def _shadow_name(view, func: ast.AST, x: str) -> str:
    """`_seq_lens_cpu` when the class keeps the CPU lengths behind a property (vLLM's
    `CommonAttentionMetadata`), else the field as the class or the function names it."""
    try:
        cls = class_of(view, x, local_aliases(func))
    except Exception:
        cls = None
    fields = class_fields(cls) if cls is not None else set()
    if "_seq_lens_cpu" in fields or f"{x}._seq_lens_cpu" in view.source.text:
        return "_seq_lens_cpu"
    if "seq_lens_cpu" in fields:
        return "seq_lens_cpu"
    return "_seq_lens_cpu"


# -- a copy ------------------------------------------------------------------------------------------


def _in_the_copy(ed: Editor, func: ast.AST, node: ast.AST, field: str, stale: list[str], view,
                 memos: set[str] = frozenset()) -> Fix | None:
    call = _call_of(func, node)
    if call is None:
        return None
    advanced = next((kw for kw in call.keywords if kw.arg == field), None)
    if advanced is None:
        return None
    amount = _added(advanced.value, field)
    if amount is None:
        return None
    source_obj = _copied_object(call, advanced.value, field)
    if source_obj is None:
        return None
    x = ed.node_text(source_obj)
    k = _wrap(ed.node_text(amount))
    if "\n" in x or "\n" in k:
        return None
    cap = _cap(func, field, ed)
    given = {kw.arg: kw for kw in call.keywords if kw.arg}
    stale = stale + _sibling_bounds(view, func, x, stale, given)
    edits: list[Edit] = []
    new: list[str] = []
    for d in stale:
        if d in memos:
            name, value = d, "None"
        elif d == "max_seq_len":
            name, value = d, (f"min(\n    {x}.max_seq_len + {k}, {cap}\n)" if cap else f"{x}.max_seq_len + {k}")
        elif _plain(d) == "seq_lens_cpu":
            name = next((n for n in ("_seq_lens_cpu", "seq_lens_cpu") if n in given), "_seq_lens_cpu")
            value = f"(\n    {x}.{name} + {k}\n    if {x}.{name} is not None\n    else None\n)"
        else:
            name, value = d, f"(\n    {x}.{d} + {k}\n    if {x}.{d} is not None\n    else None\n)"
        old = given.get(name)
        if old is not None:  # the old value copied in: advance it there
            edits.append(ed.replace(old.value, collapse(value)))
        else:
            new.append(f"{name}={value}")
    if new:
        edit = add_keywords(ed, call, new)
        if edit is None:
            return None
        edits.append(edit)
    names = ", ".join(f"`{d}`" for d in stale)
    what = last_name(call.func) or "the call"
    return Fix(UNSAFE, f"Advance {names} in the same `{what}(...)` as `{field}`", tuple(edits))


def _call_of(func: ast.AST, node: ast.AST) -> ast.Call | None:
    if isinstance(node, ast.Call):
        return node
    for sub in walk_local(func):
        if isinstance(sub, ast.Call) and any(kw is node for kw in sub.keywords):
            return sub
    return None


def _copied_object(call: ast.Call, advanced_value: ast.AST, field: str) -> ast.AST | None:
    """`X` of `replace(X, ...)` / `X.replace(...)`; else the object whose `field` the new
    value is computed from (`Cls(seq_lens=old.seq_lens + 1, ...)`)."""
    if last_name(call.func) == "replace":
        if isinstance(call.func, ast.Attribute) and ref(call.func) not in ("dataclasses.replace", "copy.replace"):
            return call.func.value
        if call.args:
            return call.args[0]
    for sub in ast.walk(advanced_value):
        if isinstance(sub, ast.Attribute) and sub.attr == field:
            return sub.value
    return None


# -- small helpers -------------------------------------------------------------------------------------


def _plain(d: str) -> str:
    return d.lstrip("_")


def _known(d: str) -> bool:
    return _plain(d) in _KNOWN or _is_bound(d)


def _is_bound(d: str) -> bool:
    """A CPU upper bound of the lengths (`seq_lens_cpu_upper_bound`, its per-rank
    `dcp_local_seq_lens_cpu_upper_bound`): advanced by the same amount as the lengths."""
    return d.endswith("seq_lens_cpu_upper_bound")


def _sibling_bounds(view, func: ast.AST, x: str, stale: list[str], given) -> list[str]:
    """The other CPU upper bounds of the lengths that the class of `x` declares: a copy
    that advances one bound advances them all, by the same amount."""
    if not any(_is_bound(d) for d in stale):
        return []
    try:
        cls = class_of(view, x, local_aliases(func))
    except Exception:
        cls = None
    fields = class_fields(cls) if cls is not None else set()
    return sorted(f for f in fields if _is_bound(f) and f not in stale and f not in given)


def _wrap(amount: str) -> str:
    return amount if re.fullmatch(r"[\w.]+", amount) else f"({amount})"
