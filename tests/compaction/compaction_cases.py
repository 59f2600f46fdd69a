"""Shared helpers for the compaction tests: inputs and the expected result."""

from __future__ import annotations

import torch


def make_buffer(rows: int, width: int, dtype=torch.int32, seed: int = 0) -> torch.Tensor:
    # Distinct values per element, so any misplaced row or column shows up.
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2**31 - 1, (rows, width), generator=g, dtype=torch.int64).to(dtype)


def expected_after(buf: torch.Tensor, row_ids: torch.Tensor) -> torch.Tensor:
    """Out-of-place oracle: a fresh tensor, so no in-place question arises."""
    out = buf.clone()
    n = row_ids.shape[0]
    if n:
        out[:n] = buf.clone()[row_ids.long()]
    return out


def two_per_request(n: int, dtype=torch.int64) -> torch.Tensor:
    return torch.arange(n, dtype=dtype) * 2 + 1


def random_row_ids(n: int, rows: int, seed: int, dtype=torch.int64) -> torch.Tensor:
    """Any valid ids: row_ids[i] uniform in [i, rows), duplicates allowed, not sorted."""
    g = torch.Generator().manual_seed(seed)
    lo = torch.arange(n)
    span = rows - lo
    return (lo + (torch.rand(n, generator=g) * span).long().clamp(max=span - 1)).to(dtype)
