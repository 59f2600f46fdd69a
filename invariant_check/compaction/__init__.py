"""Reference in-place compaction of shared top-k index buffers (the fix IC002 prescribes).

Torch is imported here; Triton only when the Triton backend is first used.
"""

from __future__ import annotations

from .api import BACKENDS, compact_rows_
from .modules import NoTopkBufferError, compact_topk_indices_, find_topk_buffers

__all__ = ["BACKENDS", "NoTopkBufferError", "compact_rows_", "compact_topk_indices_", "find_topk_buffers"]
