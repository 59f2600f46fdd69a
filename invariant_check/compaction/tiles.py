"""Tile choice and the specialisation key for the compaction kernel (no triton import).

Kept apart from kernel.py so that it can be tested and imported without Triton.
"""

from __future__ import annotations

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

# The buffer loop is unrolled per buffer; beyond this many buffers a second
# launch is cheaper than the code growth (models have 1 to a handful).
MAX_BUFFERS_PER_LAUNCH = 8

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


def spec_key(device, group, strides, widths, row_ids, rid_stride, n, block_w, chunk, num_warps) -> tuple:
    """A key that determines Triton's specialisation of ``compact_rows_kernel`` for these arguments.

    Triton specialises pointers on 16-byte alignment and integers on ``== 1``,
    divisibility by 16 and 32/64-bit range; ``n`` only on its range. Strides,
    widths and the row-id stride go in exactly (they are fixed per buffer), the
    pointers by their address modulo 16, so equal keys imply equal specialisations.
    """
    key = [device, row_ids.dtype, row_ids.data_ptr() % 16, rid_stride, -(2**31) <= n < 2**31,
           strides, widths, block_w, chunk, num_warps]
    for b in group:
        key.append(b.dtype)
        key.append(b.data_ptr() % 16)
    return tuple(key)
