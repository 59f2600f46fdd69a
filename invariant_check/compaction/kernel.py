"""Triton kernel for in-place row compaction of one or more buffers.

Imported only when the Triton backend is used. ``TRITON_INTERPRET`` is read when
``@triton.jit`` runs, i.e. when this module is first imported; the tests rely on
that to get an interpreted copy of the kernel.

Race-freedom, for any schedule of programs
------------------------------------------
Each program owns one band of BLOCK_W columns of one buffer; bands never
overlap, so programs never touch each other's elements and the order in which
the GPU runs them does not matter.

Inside a program, rows are walked upwards in chunks of CHUNK rows. For chunk k
(destination rows ``c_k .. c_k + CHUNK - 1``) the program loads the source rows
``row_ids[j]`` of those destinations, executes a CTA barrier, then stores.

* Rows stored before chunk k are all ``< c_k``; chunk k reads only rows
  ``row_ids[j] >= j >= c_k``. So no earlier store can have clobbered a source.
* Within chunk k a source row may also be a destination of the same chunk
  (``row_ids[i] == j`` with ``i < j``, both in the chunk). Different threads may
  load and store it; the barrier makes every thread's load of the chunk happen
  before any thread's store of the chunk.
* A row read by chunk k and written by a later chunk is written after that
  later chunk's barrier, which every thread reaches only after chunk k's loads.

The argument also covers a compiler that prefetches later chunks' loads
before earlier chunks' stores (software pipelining): chunk k+m reads rows
``>= c_{k+m}``, and no store up to chunk k+m-1 reaches that far.
tests/compaction/test_compaction_ptx.py checks on sm_90 PTX that the barrier
survives compilation between the loads and the stores.

Rows with ``row_ids[i] == i`` would copy onto themselves, so they are masked
out (no traffic), which also makes the one-token-per-request case nearly free.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.driver import driver as _driver

from ..settings import envvars
from .tiles import (
    DEFAULT_BLOCK_W,
    DEFAULT_CHUNK,
    DEFAULT_NUM_WARPS,
    MAX_BUFFERS_PER_LAUNCH,
    pick_tiles,
    spec_key,
    tiles_for_sms,
)

__all__ = [
    "DEFAULT_BLOCK_W",
    "DEFAULT_CHUNK",
    "DEFAULT_NUM_WARPS",
    "MAX_BUFFERS_PER_LAUNCH",
    "compact_rows_kernel",
    "is_interpreted",
    "launch",
    "tiles_for_sms",
]


@triton.jit
def _compact_band(
    ptr,
    stride,
    width,
    col0,
    row_ids_ptr,
    rid_stride,
    n,
    BLOCK_W: tl.constexpr,
    CHUNK: tl.constexpr,
):
    cols = col0 + tl.arange(0, BLOCK_W)
    col_ok = cols < width
    for r0 in tl.range(0, n, CHUNK):
        rows = r0 + tl.arange(0, CHUNK)
        row_ok = rows < n
        src = tl.load(row_ids_ptr + rows.to(tl.int64) * rid_stride, mask=row_ok, other=0).to(tl.int64)
        moves = (row_ok & (src != rows))[:, None] & col_ok[None, :]
        vals = tl.load(ptr + src[:, None] * stride + cols[None, :], mask=moves)
        # Every load of this chunk before any store of it (see module docstring).
        tl.debug_barrier()
        tl.store(ptr + rows.to(tl.int64)[:, None] * stride + cols[None, :], vals, mask=moves)


@triton.jit(do_not_specialize=["n"])
def compact_rows_kernel(
    bufs,
    strides,
    widths,
    row_ids_ptr,
    rid_stride,
    n,
    NUM_BUFS: tl.constexpr,
    BLOCK_W: tl.constexpr,
    CHUNK: tl.constexpr,
):
    pid = tl.program_id(0)
    band_lo = 0
    # Static loop: each buffer keeps its own pointer type and alignment facts,
    # and no pointer table has to be allocated or kept alive for CUDA graphs.
    for b in tl.static_range(NUM_BUFS):
        # Plain arithmetic, not tl.cdiv: the interpreted copy of this kernel may run
        # next to a compiled-mode triton.language (see tests/compaction/conftest.py).
        band_hi = band_lo + (widths[b] + BLOCK_W - 1) // BLOCK_W
        if (pid >= band_lo) & (pid < band_hi):
            _compact_band(
                bufs[b], strides[b], widths[b], (pid - band_lo) * BLOCK_W,
                row_ids_ptr, rid_stride, n, BLOCK_W, CHUNK,
            )
        band_lo = band_hi


def is_interpreted() -> bool:
    """True if this module was imported with ``TRITON_INTERPRET=1`` (runs on CPU tensors)."""
    return not isinstance(compact_rows_kernel, triton.runtime.jit.JITFunction)


# JITFunction.run re-derives the specialisation from every argument on every
# call, several microseconds of Python, which is most of an eager call. The
# buffers are persistent, so a compiled kernel is reused under a key that
# determines Triton's specialisation (tiles.spec_key; tested against Triton's
# own specialiser). INVARIANT_CHECK_COMPACTION_FAST_LAUNCH=0 turns this off.
_compiled: dict[tuple, object] = {}
_FAST_LAUNCH = bool(envvars.get("INVARIANT_CHECK_COMPACTION_FAST_LAUNCH"))


def launch(
    bufs,
    row_ids,
    *,
    block_w: int | None = None,
    chunk: int | None = None,
    num_warps: int | None = None,
) -> None:
    """Compact validated, deduplicated buffers (sequence of 2-D tensors) in place.

    No allocation and no host sync: safe to capture in a CUDA graph once the
    kernel has been compiled (i.e. after one eager call with the same buffers).
    ``n`` is not specialised on, so a changing batch size never recompiles.
    """
    n = row_ids.shape[0]
    if n == 0:
        return
    rid_stride = row_ids.stride(0)
    fast = _FAST_LAUNCH and not is_interpreted()
    for start in range(0, len(bufs), MAX_BUFFERS_PER_LAUNCH):
        group = tuple(bufs[start:start + MAX_BUFFERS_PER_LAUNCH])
        widths = tuple(b.shape[1] for b in group)
        bw, ch, nw = pick_tiles(widths, group[0].device)
        bw, ch, nw = block_w or bw, chunk or ch, num_warps or nw
        grid = (sum(-(-w // bw) for w in widths),)
        if grid[0] == 0:
            continue
        strides = tuple(b.stride(0) for b in group)
        key = None
        if fast:
            device = _driver.active.get_current_device()
            key = spec_key(device, group, strides, widths, row_ids, rid_stride, n, bw, ch, nw)
            compiled = _compiled.get(key)
            if compiled is not None:
                # Same positional arguments as JITFunction.run passes; the launcher
                # flattens the tuples and drops the constexprs itself. A compiled
                # kernel's launcher reads all three grid dimensions (JITFunction.run
                # pads the grid; here it is given whole).
                compiled[(grid[0], 1, 1)](group, strides, widths, row_ids, rid_stride, n, len(group), bw, ch)
                continue
        compiled = compact_rows_kernel[grid](
            group, strides, widths, row_ids, rid_stride, n,
            NUM_BUFS=len(group), BLOCK_W=bw, CHUNK=ch, num_warps=nw,
        )
        if key is not None and compiled is not None:
            _compiled[key] = compiled
