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

__all__ = ["MAX_BUFFERS_PER_LAUNCH", "compact_rows_kernel", "is_interpreted", "launch"]

# The buffer loop is unrolled per buffer; beyond this many buffers a second
# launch is cheaper than the code growth (models have 1 to a handful).
MAX_BUFFERS_PER_LAUNCH = 8

# Parallelism comes only from column bands (rows are walked in order), so on a
# GPU the band width shrinks until there is about one band per SM; the chunk
# then grows so that each program keeps a ~16 KiB int32 tile in flight per
# barrier. Untuned guesses until bench/compaction_gpu.py has run on a GPU (its
# sweep reports the best fixed configuration). The interpreter uses the defaults.
DEFAULT_BLOCK_W = 64
DEFAULT_CHUNK = 64
DEFAULT_NUM_WARPS = 4
BAND_WIDTHS = (64, 32, 16)
TILE_ELEMS = 4096
MAX_CHUNK = 128

_sm_counts: dict[int, int] = {}


def _sm_count(device) -> int:
    index = device.index if device.index is not None else 0
    if index not in _sm_counts:
        import torch

        _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_counts[index]


def pick_tiles(widths, device) -> tuple[int, int, int]:
    """(BLOCK_W, CHUNK, num_warps) for these buffer widths on this device."""
    if device.type != "cuda":
        return DEFAULT_BLOCK_W, DEFAULT_CHUNK, DEFAULT_NUM_WARPS
    return tiles_for_sms(widths, _sm_count(device))


def tiles_for_sms(widths, sms: int) -> tuple[int, int, int]:
    block_w = BAND_WIDTHS[-1]
    for bw in BAND_WIDTHS:
        if sum(-(-w // bw) for w in widths) >= sms:
            block_w = bw
            break
    chunk = min(MAX_CHUNK, TILE_ELEMS // block_w)
    # With 4 warps a 128-row chunk gets its row ids in a different layout from
    # the tile, and the compiler converts through shared memory (seen in sm_90
    # PTX); 8 warps keep one layout.
    return block_w, chunk, 8 if chunk >= 128 else DEFAULT_NUM_WARPS


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
    for start in range(0, len(bufs), MAX_BUFFERS_PER_LAUNCH):
        group = tuple(bufs[start:start + MAX_BUFFERS_PER_LAUNCH])
        widths = tuple(b.shape[1] for b in group)
        bw, ch, nw = pick_tiles(widths, group[0].device)
        bw, ch, nw = block_w or bw, chunk or ch, num_warps or nw
        grid = (sum(-(-w // bw) for w in widths),)
        if grid[0] == 0:
            continue
        compact_rows_kernel[grid](
            group,
            tuple(b.stride(0) for b in group),
            widths,
            row_ids,
            rid_stride,
            n,
            NUM_BUFS=len(group),
            BLOCK_W=bw,
            CHUNK=ch,
            num_warps=nw,
        )
