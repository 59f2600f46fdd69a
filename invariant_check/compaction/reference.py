"""Torch reference: the gather vLLM's ``compact_topk_indices`` does today, per buffer."""

from __future__ import annotations

import torch

__all__ = ["compact_rows_reference_"]


def compact_rows_reference_(buffers: list[torch.Tensor], row_ids: torch.Tensor) -> None:
    """``buf[:n] = buf[row_ids]`` for every buffer (validated, deduplicated).

    ``index_select`` materialises the gathered rows before the copy, so the
    in-place overlap is safe; the price is one temporary and two kernels per buffer.
    """
    n = row_ids.shape[0]
    if n == 0:
        return
    for buf in buffers:
        buf[:n].copy_(buf.index_select(0, row_ids))
