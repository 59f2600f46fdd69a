"""``compact_rows_``: validate, deduplicate, dispatch to the Triton kernel or torch."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import torch

from .reference import compact_rows_reference_
from .validate import (
    check_row_ids,
    check_row_values,
    normalize_buffers,
    want_value_checks,
)

__all__ = ["BACKENDS", "compact_rows_"]

BACKENDS = ("auto", "triton", "torch")

# The kernel module is imported on first use so that this package works
# without triton, and so that TRITON_INTERPRET is read as late as possible.
_kernel: ModuleType | None = None


def _kernel_module() -> ModuleType:
    global _kernel
    if _kernel is None:
        from . import kernel

        _kernel = kernel
    return _kernel


def _resolve_backend(backend: str, device: torch.device) -> str:
    if backend != "auto":
        return backend
    if device.type != "cuda":
        return "torch"
    try:
        _kernel_module()
    except ImportError:
        return "torch"
    return "triton"


def compact_rows_(
    buffers: torch.Tensor | Sequence[torch.Tensor],
    row_ids: torch.Tensor,
    *,
    backend: str = "auto",
    check: bool | None = None,
) -> None:
    """In place, for every buffer: ``buf[i, :] = old buf[row_ids[i], :]`` for ``i < len(row_ids)``.

    ``buffers``: a 2-D ``[rows, width]`` int32/int64 tensor with contiguous rows,
    or a sequence of them (widths and dtypes may differ; the same view given
    twice is compacted once). ``row_ids``: 1-D int32/int64 with
    ``i <= row_ids[i] < rows`` (each request's last-token row).
    ``backend``: ``"triton"`` (one fused launch), ``"torch"`` (gather + copy per
    buffer) or ``"auto"`` (Triton on CUDA tensors, torch otherwise).
    ``check``: run the value checks that need a device sync; default: always on
    CPU, on accelerators only with ``INVARIANT_CHECK_COMPACTION_DEBUG=1``.
    Bad arguments raise ``ValueError`` naming the argument.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    bufs = normalize_buffers(buffers)
    check_row_ids(row_ids, bufs)
    if want_value_checks(row_ids, check):
        check_row_values(row_ids, bufs)
    which = _resolve_backend(backend, row_ids.device)
    if not bufs or row_ids.shape[0] == 0:
        return
    if which == "torch":
        compact_rows_reference_(bufs, row_ids)
        return
    kernel = _kernel_module()
    if row_ids.device.type == "cpu" and not kernel.is_interpreted():
        raise ValueError(
            "backend: 'triton' needs CUDA tensors, or TRITON_INTERPRET=1 set before "
            "invariant_check.compaction.kernel is first imported, to run on CPU tensors"
        )
    kernel.launch(bufs, row_ids)
