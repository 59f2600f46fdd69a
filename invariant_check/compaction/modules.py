"""Where a model keeps its shared top-k index buffers, and ``compact_topk_indices_``, a drop-in
body for vLLM models' ``compact_topk_indices``.

``find_topk_holders`` is the one finder of buffer holders: the compaction gathers the buffers it
finds, and invariant-check's ``topk-layout`` guard checks those same buffers (and the holders'
agreement), so the guard can never check other buffers than the kernel gathered.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch import nn

from .api import compact_rows_

__all__ = [
    "NoTopkBufferError",
    "TopkHolder",
    "compact_topk_indices_",
    "find_topk_buffers",
    "find_topk_holders",
    "read_buffers",
]

ATTR = "topk_indices_buffer"
# vLLM's SharedTopkIndicesBuffer keeps the tensor it was built with here and resolves ATTR
# through the indexer on every read (the v2 runner repoints indexers after the impls exist), so
# it is a holder only on objects that have no ATTR at all.
SNAPSHOT_ATTR = "_topk_indices_buffer"
# Read for device, dtype and width only: vLLM 0.32's sparse-index group sizes its workspace from
# it; the rows it converts are passed in per call.
LAYOUT_ONLY_ATTRS = ("logical_topk_indices",)
DEPTH = 2  # module -> attention impl -> its sparse-index group

_LEAVES = (torch.Tensor, nn.Module, str, bytes, int, float, bool, complex, type(None), type)


@dataclass(frozen=True)
class TopkHolder:
    path: str  # e.g. "layers.1.mtp_block.self_attn.impl"
    obj: object
    attr: str
    read: bool  # attention reads its rows (False: layout-only)

    @property
    def name(self) -> str:
        return f"{self.path}.{self.attr}" if self.path else self.attr

    def tensor(self) -> torch.Tensor | None:
        """The holder's current tensor (re-read: vLLM repoints holders after load)."""
        try:
            value = getattr(self.obj, self.attr)
        except Exception:  # a property may raise before it is wired up; then it holds nothing
            return None
        return value if isinstance(value, torch.Tensor) else None


def _has(obj: object, attr: str) -> bool:
    try:
        getattr(obj, attr)
    except Exception:
        return False
    return True


def _children(obj: object):
    """Plain objects an object keeps, by attribute name: attention ``impl``s, lists of them..."""
    try:
        attrs = vars(obj)
    except TypeError:
        return
    for name, value in list(attrs.items()):
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                yield f"{name}.{i}", item
        elif isinstance(value, dict):
            for key, item in list(value.items()):
                yield f"{name}.{key}", item
        else:
            yield name, value


def find_topk_holders(module: nn.Module, depth: int = DEPTH) -> tuple[TopkHolder, ...]:
    """Every (object, attribute) under ``module`` that holds a top-k index buffer: the modules
    and the plain objects they keep, up to ``depth`` objects below a module."""
    found: list[TopkHolder] = []
    seen: set[int] = set()

    def visit(path: str, obj: object, level: int) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        has_main = _has(obj, ATTR)
        if has_main:
            found.append(TopkHolder(path, obj, ATTR, True))
        elif _has(obj, SNAPSHOT_ATTR):
            found.append(TopkHolder(path, obj, SNAPSHOT_ATTR, True))
        for attr in LAYOUT_ONLY_ATTRS:
            if _has(obj, attr):
                found.append(TopkHolder(path, obj, attr, False))
        if level >= depth:
            return
        for name, child in _children(obj):
            if isinstance(child, _LEAVES) or not hasattr(child, "__dict__"):
                continue
            visit(f"{path}.{name}" if path else name, child, level + 1)

    for path, sub in module.named_modules():
        visit(path, sub, 0)
    return tuple(found)


def _view_key(t: torch.Tensor) -> tuple:
    return (t.device, t.dtype, t.data_ptr(), tuple(t.shape), t.stride())


def read_buffers(holders: tuple[TopkHolder, ...]) -> list[tuple[str, torch.Tensor]]:
    """The distinct buffers the holders' readers use, each with the first holder's name:
    2-D integer tensors, one entry per distinct view (a view held twice is gathered once)."""
    out: dict[tuple, tuple[str, torch.Tensor]] = {}
    for h in holders:
        if not h.read:
            continue
        t = h.tensor()
        if t is None or t.dim() != 2 or t.dtype.is_floating_point or t.dtype == torch.bool:
            continue
        out.setdefault(_view_key(t), (h.name, t))
    return list(out.values())


# Holders per model. Walking every module on each draft step would cost more than the copy; the
# attributes are re-read on every call because vLLM re-points them at the target's buffer.
_holders: weakref.WeakKeyDictionary[nn.Module, tuple[TopkHolder, ...]] = weakref.WeakKeyDictionary()


def cached_holders(module: nn.Module, *, refresh: bool = False) -> tuple[TopkHolder, ...]:
    holders = None if refresh else _holders.get(module)
    if holders is None:
        holders = find_topk_holders(module)
        _holders[module] = holders
    return holders


def find_topk_buffers(module: nn.Module, *, refresh: bool = False) -> list[torch.Tensor]:
    """The distinct top-k index buffers under ``module``: what a compaction must gather."""
    return [t for _, t in read_buffers(cached_holders(module, refresh=refresh))]


class NoTopkBufferError(LookupError):
    """``compact_topk_indices_`` found no top-k index buffer under the module it was given.

    A compaction that silently does nothing is the bug this package exists to fix: step 1+
    would read rows step 0 wrote per token. ``module`` is the model, ``holders`` the attributes
    that were looked for.
    """

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        cls = type(module)
        where = f"{cls.__module__}.{cls.__qualname__}"
        looked = ", ".join(f"`{a}`" for a in (ATTR, SNAPSHOT_ATTR))
        super().__init__(
            f"compact_topk_indices_: no top-k index buffer under {where}: no submodule, nor an "
            f"object they keep (up to {DEPTH} levels), has a 2-D integer tensor in {looked}; "
            "nothing was compacted. Pass missing_ok=True if this model has no sparse attention "
            "to compact."
        )


def compact_topk_indices_(
    module: nn.Module, slot_ids: torch.Tensor, *, backend: str = "auto", missing_ok: bool = False
) -> None:
    """Compact every distinct top-k index buffer under ``module`` to ``slot_ids``, in one call.

    Written as ``(self, slot_ids)`` so it can replace a model class's
    ``compact_topk_indices`` method directly.

    Raises ``NoTopkBufferError`` (a ``LookupError`` naming the module's class) when ``module``
    holds no top-k index buffer, unless ``missing_ok=True`` says that none is expected (a model
    without sparse attention): a compaction that finds nothing to compact is otherwise the
    silent missed compaction of vLLM PR #47238. The holders are looked up again once before
    raising, in case vLLM wired the buffers after the first call cached none.
    """
    buffers = find_topk_buffers(module)
    if not buffers and not missing_ok:
        buffers = find_topk_buffers(module, refresh=True)
        if not buffers:
            raise NoTopkBufferError(module)
    if buffers:
        compact_rows_(buffers, slot_ids, backend=backend)
