"""The counter-example: one program per destination row, no column bands, no barrier.

Correct whenever programs run in launch order (as the Triton interpreter runs
them); wrong on a GPU, where program ``row_ids[i]`` may write its row before
program ``i`` has read it. Kept to prove that the schedule tests can fail.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def naive_compact_kernel(ptr, stride, width, row_ids_ptr, BLOCK_W: tl.constexpr):
    i = tl.program_id(0)
    src = tl.load(row_ids_ptr + i).to(tl.int64)
    for c0 in tl.range(0, width, BLOCK_W):
        cols = c0 + tl.arange(0, BLOCK_W)
        ok = cols < width
        vals = tl.load(ptr + src * stride + cols, mask=ok)
        tl.store(ptr + i * stride + cols, vals, mask=ok)


def naive_launch(buf, row_ids, block_w: int = 64) -> None:
    n = row_ids.shape[0]
    if n:
        naive_compact_kernel[(n,)](buf, buf.stride(0), buf.shape[1], row_ids, BLOCK_W=block_w)
