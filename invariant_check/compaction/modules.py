"""``compact_topk_indices_``: a drop-in body for vLLM models' ``compact_topk_indices``."""

from __future__ import annotations

import weakref

import torch
from torch import nn

from .api import compact_rows_

__all__ = ["compact_topk_indices_", "find_topk_buffers", "find_topk_holders"]

ATTR = "topk_indices_buffer"

# Holders (objects exposing ATTR) per model. Walking every module on each draft
# step would cost more than the copy; the attribute is re-read on every call
# because vLLM re-points it at the target model's buffer after load.
_holders: weakref.WeakKeyDictionary[nn.Module, tuple[object, ...]] = weakref.WeakKeyDictionary()


def _has_attr(obj: object) -> bool:
    try:
        getattr(obj, ATTR)
    except Exception:  # a property may raise before it is wired up; then it holds nothing
        return False
    return True


def _attribute_objects(module: nn.Module):
    """Plain objects hanging off a module: attention ``impl``s, lists of layers, ..."""
    for value in vars(module).values():
        if isinstance(value, (list, tuple)):
            yield from value
        elif isinstance(value, dict) and not isinstance(value, nn.Module):
            yield from value.values()
        else:
            yield value


def find_topk_holders(module: nn.Module) -> tuple[object, ...]:
    """Every object under ``module`` that has a ``topk_indices_buffer`` attribute."""
    found: dict[int, object] = {}

    def visit(obj: object) -> None:
        if (
            id(obj) not in found
            and not isinstance(obj, (torch.Tensor, str, bytes, int, float, bool, type(None)))
            and _has_attr(obj)
        ):
            found[id(obj)] = obj

    for sub in module.modules():
        visit(sub)
        for obj in _attribute_objects(sub):
            visit(obj)
    return tuple(found.values())


def find_topk_buffers(module: nn.Module, *, refresh: bool = False) -> list[torch.Tensor]:
    """The ``topk_indices_buffer`` tensors under ``module`` (duplicates are removed later)."""
    holders = None if refresh else _holders.get(module)
    if holders is None:
        holders = find_topk_holders(module)
        _holders[module] = holders
    out = []
    for holder in holders:
        try:
            buf = getattr(holder, ATTR)
        except Exception:
            continue
        if isinstance(buf, torch.Tensor):
            out.append(buf)
    return out


def compact_topk_indices_(module: nn.Module, slot_ids: torch.Tensor, *, backend: str = "auto") -> None:
    """Compact every distinct ``topk_indices_buffer`` under ``module`` to ``slot_ids``, in one call.

    Written as ``(self, slot_ids)`` so it can replace a model class's
    ``compact_topk_indices`` method directly.
    """
    buffers = find_topk_buffers(module)
    if buffers:
        compact_rows_(buffers, slot_ids, backend=backend)
