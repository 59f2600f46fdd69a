"""The memo caches a metadata class defines, learned from its source, and their recomputation.

A memo is a method that returns `self._x` when it is set and otherwise fills `self._x` from the
object's other fields (vLLM 0.25+: `CommonAttentionMetadata.token_to_req_indices(buffer)` with
`_token_to_req_indices_cache`, `compute_num_computed_tokens()` with `_num_computed_tokens_cache`).
Once set, the memo is returned whatever the fields say now, so code that changes the layout in
place (the V1 draft loop) must clear it. Learned from the class, not listed by hand, so a memo a
new vLLM adds is checked too: found once per class (`inspect.getsource` + `ast`), nothing when
the source is not available.

Recomputed by calling the method on a shallow copy whose memo fields are all None (a memo may
read another), with a scratch tensor shaped like the memo for each tensor parameter (the buffer
`token_to_req_indices` writes into), so nothing of the real object or vLLM's buffers changes.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any

import torch

from . import log


@dataclass(frozen=True)
class Memo:
    field: str  # "_token_to_req_indices_cache"
    method: str  # "token_to_req_indices"
    buffers: int  # required parameters after self, each given a scratch tensor
    reads: tuple[str, ...] = ()  # the other fields it is computed from, for messages
    is_property: bool = False


_by_class: dict[type, tuple[Memo, ...]] = {}
_unrecomputable: set[tuple[type, str]] = set()


def memos_of(cls: type) -> tuple[Memo, ...]:
    """The memos of cls and its bases, cached per class."""
    found = _by_class.get(cls)
    if found is None:
        found = _by_class[cls] = _learn(cls)
    return found


def _learn(cls: type) -> tuple[Memo, ...]:
    memos: dict[str, Memo] = {}
    for klass in reversed(cls.__mro__):  # a subclass's definition wins
        if klass is object or klass.__module__ == "builtins":
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue  # compiled, generated or frozen: nothing learned, nothing checked
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for fn in body:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and not fn.name.startswith("__"):
                memo = _memo_of(cls, fn)
                if memo is not None:
                    memos[memo.method] = memo
    return tuple(memos.values())


def _self_attr(node: ast.AST, self_name: str) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == self_name:
        return node.attr
    return None


def _memo_of(cls: type, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Memo | None:
    args = fn.args
    if not args.args or args.vararg or any(d is None for d in args.kw_defaults):
        return None  # nothing to call it with
    me = args.args[0].arg
    params = args.args[1:]
    required = params[: len(params) - len(args.defaults)]
    # a required parameter must be a buffer we can stand in for (a tensor, or unannotated)
    if any(a.annotation is not None and "Tensor" not in ast.unparse(a.annotation) for a in required):
        return None
    guarded, filled, returned, read = set(), set(), set(), []
    for node in ast.walk(fn):
        name = _self_attr(node, me)
        if name and isinstance(node.ctx, ast.Load) and name not in read:
            read.append(name)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            other = node.comparators[0]
            name = _self_attr(node.left, me)
            if name and isinstance(other, ast.Constant) and other.value is None:
                guarded.add(name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if value is None or isinstance(value, ast.Constant) and value.value is None:
                continue
            for t in targets:
                name = _self_attr(t, me)
                # filled from something else: a call or other fields, not from itself alone
                if name and any(_self_attr(n, me) not in (None, name) or isinstance(n, ast.Call)
                                for n in ast.walk(value)):
                    filled.add(name)
        elif isinstance(node, ast.Return) and node.value is not None:
            returned |= {n for n in (_self_attr(x, me) for x in ast.walk(node.value)) if n}
    fields = sorted(guarded & filled & returned)
    if len(fields) != 1:
        return None
    is_property = isinstance(inspect.getattr_static(cls, fn.name, None), property)
    reads = tuple(r for r in read if r != fields[0] and not r.startswith("_"))
    return Memo(fields[0], fn.name, len(required), reads, is_property)


def reset() -> None:
    """Forget which methods could not run (the learned memos stay: they depend on the code only)."""
    _unrecomputable.clear()


def set_memos(obj: Any) -> list[Memo]:
    """The memos of obj's class that are set on obj (cheap: getattr per memo)."""
    return [m for m in memos_of(type(obj)) if getattr(obj, m.field, None) is not None]


def recompute(obj: Any, memos: list[Memo], rows: int) -> dict[str, Any]:
    """{memo field: what its method returns from obj's current fields}. rows: the least first
    dimension of a scratch buffer (the memo's own, or the batch's token count if larger). A memo
    whose method cannot run here (vLLM's Triton kernel on the CPU build) is left out, and
    logged once."""
    fresh = copy.copy(obj)
    for m in memos_of(type(obj)):
        if getattr(fresh, m.field, None) is not None:
            object.__setattr__(fresh, m.field, None)  # frozen dataclasses too
    out: dict[str, Any] = {}
    for m in memos:
        key = (type(obj), m.method)
        if key in _unrecomputable:
            continue
        cached = getattr(obj, m.field)
        try:
            if m.is_property:
                value = getattr(fresh, m.method)
            else:
                scratch = []
                for _ in range(m.buffers):
                    if not isinstance(cached, torch.Tensor) or cached.dim() == 0:
                        raise TypeError("the memo is not a tensor to shape a scratch buffer on")
                    n = max(cached.shape[0], rows)
                    scratch.append(torch.zeros((n, *cached.shape[1:]), dtype=cached.dtype, device=cached.device))
                value = getattr(fresh, m.method)(*scratch)
        except Exception as exc:  # noqa: BLE001 - vLLM's code, not ours: not checkable here
            _unrecomputable.add(key)
            log.warning(f"metadata-coherence: cannot recompute {type(obj).__qualname__}.{m.method}() here "
                        f"({type(exc).__name__}: {exc}); its memo {m.field} is not checked in this process")
            continue
        out[m.field] = value
    return out
