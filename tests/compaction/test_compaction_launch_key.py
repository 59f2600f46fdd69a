"""The fast launch path reuses a compiled kernel only where Triton would have compiled the same one.

``kernel.launch`` skips ``JITFunction.run`` once a specialisation is compiled,
looking the kernel up by ``tiles.spec_key``. That is safe only if equal keys
imply equal Triton specialisations; here Triton's own specialiser decides, over
aligned and misaligned views, padded and odd strides, widths 1/7/16/128, both
dtypes, strided and misaligned row ids, and several batch sizes.
"""

from __future__ import annotations

import itertools
import os

import pytest

torch = pytest.importorskip("torch")  # the runtime extras; a lint-only install skips this module


from invariant_check.compaction.tiles import pick_tiles, spec_key, tiles_for_sms

triton = pytest.importorskip("triton")


@pytest.fixture(scope="module")
def compiled_kernel():
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs compiled-mode Triton")
    from invariant_check.compaction import kernel

    if kernel.is_interpreted():
        pytest.skip("kernel module is interpreted in this process")
    return kernel.compact_rows_kernel


def _triton_specialisation(fn, backend, args):
    from triton.runtime.jit import native_specialize_impl

    out = []
    for p in fn.params:
        value = args[p.name]
        if p.is_constexpr:
            out.append(("constexpr", value))
        else:
            out.append(repr(native_specialize_impl(
                type(backend), value, False, not p.do_not_specialize, not p.do_not_specialize_on_alignment
            )))
    return tuple(out)


def _buffers():
    out = []
    for dtype in (torch.int32, torch.int64):
        wide = torch.zeros(64, 128, dtype=dtype)
        narrow = torch.zeros(64, 7, dtype=dtype)
        out += [
            wide,                      # aligned, stride 128, width 128
            wide[:, :7],               # padded rows
            wide[1:, :7],              # offset by one row (still aligned)
            wide[:, 1:8],              # offset by one element: misaligned
            narrow,                    # stride 7
            narrow[1:],                # misaligned
            narrow[16:],               # realigned
            torch.zeros(64, 1, dtype=dtype),
            torch.zeros(64, 16, dtype=dtype),
        ]
    return out


def _row_ids():
    base32, base64 = torch.arange(40, dtype=torch.int32), torch.arange(40, dtype=torch.int64)
    return [base32[:16], base64[:16], base32[1:17], base32[4:20], base64[1:17], base32[::2][:16]]


def test_equal_keys_imply_equal_triton_specialisations(compiled_kernel):
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    backend = make_backend(GPUTarget("cuda", 90, 32))
    bufs = _buffers()
    groups = [(b,) for b in bufs] + [pair for pair in itertools.combinations(bufs[::2], 2)]
    seen: dict[tuple, tuple] = {}
    distinct_specs = set()
    collisions = 0
    for group, ids, n, (bw, ch, nw) in itertools.product(groups, _row_ids(), (1, 5, 16), ((64, 64, 4), (16, 128, 8))):
        strides = tuple(b.stride(0) for b in group)
        widths = tuple(b.shape[1] for b in group)
        args = {
            "bufs": group, "strides": strides, "widths": widths, "row_ids_ptr": ids,
            "rid_stride": ids.stride(0), "n": n, "NUM_BUFS": len(group), "BLOCK_W": bw, "CHUNK": ch,
        }
        spec = _triton_specialisation(compiled_kernel, backend, args) + (nw,)
        key = spec_key(0, group, strides, widths, ids, ids.stride(0), n, bw, ch, nw)
        distinct_specs.add(spec)
        if key in seen:
            collisions += 1
            assert seen[key] == spec, (key, seen[key], spec)
        else:
            seen[key] = spec
    # Not vacuous: keys are shared (n is not part of the specialisation) and
    # the inputs do produce many different specialisations.
    assert collisions > 0
    assert len(distinct_specs) > 20


def test_tiles_give_about_one_band_per_sm():
    # One int32 [*, 2048] buffer on a 132-SM card: the narrowest band still gives
    # only 128 bands; four buffers reach 132 with 32-column bands.
    assert tiles_for_sms([2048], 132)[0] == 16
    assert tiles_for_sms([2048] * 4, 132)[0] == 32
    assert tiles_for_sms([2048] * 8, 132)[0] == 64
    for widths in ([7], [2048], [2048] * 4, [100, 2000]):
        bw, ch, nw = tiles_for_sms(widths, 132)
        assert bw * ch <= 4096 and nw in (4, 8)
    assert pick_tiles([2048], torch.device("cpu")) == pick_tiles([7], torch.device("cpu"))
