"""Argument checks for the compaction API.

Shape, dtype, device and aliasing checks read only tensor metadata and always
run. Value checks (``row_ids[i] >= i``, ``max(row_ids) < rows``) read the data,
which on an accelerator is a host sync: there they run only when asked
(``check=True`` or ``INVARIANT_CHECK_COMPACTION_DEBUG=1``). On CPU they are
cheap and always run.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["DEBUG_ENV", "check_row_ids", "check_row_values", "normalize_buffers", "want_value_checks"]

DEBUG_ENV = "INVARIANT_CHECK_COMPACTION_DEBUG"
_INDEX_DTYPES = (torch.int32, torch.int64)
_BUFFER_DTYPES = (torch.int32, torch.int64)


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """Half-open byte range [lo, hi) that a strided tensor can touch."""
    if t.numel() == 0:
        return (t.data_ptr(), t.data_ptr())
    extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return (t.data_ptr(), t.data_ptr() + (extent + 1) * t.element_size())


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.device.type == "meta" or a.device != b.device or a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    (alo, ahi), (blo, bhi) = _byte_span(a), _byte_span(b)
    if not (alo < bhi and blo < ahi):
        return False
    # Column slices of one row-major storage interleave in memory without
    # sharing an element: compare their row and column ranges instead.
    if a.dim() == b.dim() == 2 and a.stride(1) == b.stride(1) == 1 and a.element_size() == b.element_size():
        pitch = a.stride(0) * a.element_size()
        if pitch and b.stride(0) * b.element_size() == pitch:
            base = a.untyped_storage().data_ptr()
            (ar, ac), (br, bc) = divmod(alo - base, pitch), divmod(blo - base, pitch)
            aw, bw = a.shape[1] * a.element_size(), b.shape[1] * b.element_size()
            if ac + aw <= pitch and bc + bw <= pitch:
                rows = ar < br + b.shape[0] and br < ar + a.shape[0]
                cols = ac < bc + bw and bc < ac + aw
                return rows and cols
    return True


def normalize_buffers(buffers: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Return the distinct non-empty buffers, each checked to be a compactable 2-D tensor.

    The same view passed twice is kept once (compacting it twice would apply the
    gather twice). Two different views that overlap cannot be compacted
    independently, so they are rejected. Runs on every call: one pass, and
    pairwise work only for views of one storage.
    """
    if isinstance(buffers, torch.Tensor):
        buffers = (buffers,)
    elif not isinstance(buffers, Sequence) or isinstance(buffers, (str, bytes)):
        raise ValueError(f"buffers: expected a 2-D tensor or a sequence of them, got {type(buffers).__name__}")
    out: list[torch.Tensor] = []
    views: set[tuple] = set()
    by_storage: dict[int, list[torch.Tensor]] = {}
    device = None
    is_meta = False
    for k, buf in enumerate(buffers):
        if not isinstance(buf, torch.Tensor):
            raise ValueError(f"buffers[{k}]: expected a tensor, got {type(buf).__name__}")
        shape, stride = buf.shape, buf.stride()
        if len(shape) != 2:
            raise ValueError(f"buffers[{k}]: expected a 2-D [rows, width] tensor, got shape {tuple(shape)}")
        if buf.dtype not in _BUFFER_DTYPES:
            raise ValueError(f"buffers[{k}]: dtype must be int32 or int64, got {buf.dtype}")
        if shape[1] > 1 and stride[1] != 1:
            raise ValueError(f"buffers[{k}]: rows must be contiguous (stride(1) == 1), got strides {stride}")
        if shape[0] > 1 and stride[0] < shape[1]:
            raise ValueError(f"buffers[{k}]: rows overlap each other (stride(0) {stride[0]} < width {shape[1]})")
        if device is None:
            device = buf.device
            is_meta = device.type == "meta"
        elif buf.device != device:
            raise ValueError(f"buffers[{k}]: on {buf.device}, but buffers[0] is on {device}; all buffers must share a device")
        if shape[1] == 0:
            continue
        if is_meta:  # no memory: nothing can alias
            out.append(buf)
            continue
        view = (buf.data_ptr(), shape, stride, buf.dtype)
        if view in views:
            continue
        views.add(view)
        siblings = by_storage.setdefault(buf.untyped_storage().data_ptr(), [])
        for seen in siblings:
            if _overlap(buf, seen):
                raise ValueError(f"buffers[{k}]: overlaps another buffer without being the same view")
        siblings.append(buf)
        out.append(buf)
    return out


def check_row_ids(row_ids: torch.Tensor, buffers: list[torch.Tensor]) -> None:
    """Metadata-only checks of ``row_ids`` against the (normalized) buffers."""
    if not isinstance(row_ids, torch.Tensor):
        raise ValueError(f"row_ids: expected a tensor, got {type(row_ids).__name__}")
    if row_ids.dim() != 1:
        raise ValueError(f"row_ids: expected a 1-D tensor, got shape {tuple(row_ids.shape)}")
    if row_ids.dtype not in _INDEX_DTYPES:
        raise ValueError(f"row_ids: dtype must be int32 or int64, got {row_ids.dtype}")
    if not buffers:
        return
    device = buffers[0].device  # normalize_buffers made them share one
    if row_ids.device != device:
        raise ValueError(f"row_ids: on {row_ids.device}, but the buffers are on {device}")
    n = row_ids.shape[0]
    # row_ids[i] >= i and < rows imply n <= rows; this needs no data.
    rows = min(buf.shape[0] for buf in buffers)
    if n > rows:
        raise ValueError(f"row_ids: {n} rows requested, but a buffer has only {rows} rows")
    if n and device.type != "meta":
        storage = row_ids.untyped_storage().data_ptr()
        for buf in buffers:
            if buf.untyped_storage().data_ptr() == storage and _overlap(row_ids, buf):
                raise ValueError("row_ids: shares memory with a buffer being compacted")


def want_value_checks(row_ids: torch.Tensor, check: bool | None) -> bool:
    if check is not None:
        return bool(check)
    if row_ids.device.type == "cpu":
        return True
    from ..settings import envvars

    return bool(envvars.get(DEBUG_ENV))


def check_row_values(row_ids: torch.Tensor, buffers: list[torch.Tensor]) -> None:
    """Data checks (a host sync on accelerators): ``i <= row_ids[i] < rows``."""
    n = row_ids.shape[0]
    if n == 0 or not buffers:
        return
    ids = row_ids.to(torch.int64)
    below = ids < torch.arange(n, device=ids.device)
    if bool(below.any()):
        i = int(below.nonzero()[0, 0])
        raise ValueError(f"row_ids: row_ids[{i}] = {int(ids[i])} < {i}; each entry must be >= its position")
    rows = min(buf.shape[0] for buf in buffers)
    top = int(ids.max())
    if top >= rows:
        raise ValueError(f"row_ids: max(row_ids) = {top} out of range for a buffer with {rows} rows")
