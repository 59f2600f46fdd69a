"""Compile the compaction kernels for sm_90 on a machine without a GPU; write the PTX.

Run as a separate process (``python compaction_ptx_probe.py OUT_DIR``) so that it
gets compiled-mode Triton whatever the test process has imported. The signature
and specialisation come from Triton's own specialiser, applied to the same
arguments the launcher passes, so the PTX is what a launch on an H100/H200 with
these buffers would compile.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend
from triton.runtime.jit import native_specialize_impl

TARGET = GPUTarget("cuda", 90, 32)


def _leaves(path, ty, key, value):
    if isinstance(ty, tuple):
        for k, (t, kk, v) in enumerate(zip(ty, key, value)):
            yield from _leaves(path + (k,), t, kk, v)
    else:
        yield path, ty, key, value


def compile_ptx(fn, args: dict, num_warps: int = 4) -> str:
    backend = make_backend(TARGET)
    signature, constexprs, attrs = {}, {}, {}
    for param in fn.params:
        value = args[param.name]
        if param.is_constexpr:
            signature[param.name] = "constexpr"
            constexprs[(param.num,)] = value
            continue
        ty, key = native_specialize_impl(
            type(backend), value, False, not param.do_not_specialize, not param.do_not_specialize_on_alignment
        )
        signature[param.name] = ty
        for path, leaf_ty, leaf_key, leaf_value in _leaves((param.num,), ty, key, value):
            if leaf_ty == "constexpr":
                constexprs[path] = leaf_value
            elif leaf_key:
                attrs[path] = backend.parse_attr(leaf_key)
    src = ASTSource(fn, signature, constexprs, attrs)
    return triton.compile(src, target=TARGET, options={"num_warps": num_warps}).asm["ptx"]


def main(out_dir: str) -> None:
    out = Path(out_dir)
    from invariant_check.compaction import kernel

    assert not kernel.is_interpreted(), "probe must run without TRITON_INTERPRET"
    rows, width = 4096, 2048
    bufs = (torch.zeros(rows, width, dtype=torch.int32), torch.zeros(rows, width, dtype=torch.int64))
    row_ids = torch.zeros(256, dtype=torch.int32)
    # The tiles an H100/H200 (132 SMs) would get for these buffers, and the defaults.
    tiles = {"band": kernel.tiles_for_sms([b.shape[1] for b in bufs], 132),
             "band_default": (kernel.DEFAULT_BLOCK_W, kernel.DEFAULT_CHUNK, kernel.DEFAULT_NUM_WARPS),
             "band_int32": kernel.tiles_for_sms([width], 132)}
    for name, (block_w, chunk, num_warps) in tiles.items():
        # band_int32: the vLLM case, one int32 [rows, 2048] buffer.
        these = bufs[:1] if name == "band_int32" else bufs
        ptx = compile_ptx(
            kernel.compact_rows_kernel,
            {
                "bufs": these,
                "strides": tuple(b.stride(0) for b in these),
                "widths": tuple(b.shape[1] for b in these),
                "row_ids_ptr": row_ids,
                "rid_stride": row_ids.stride(0),
                "n": row_ids.shape[0],
                "NUM_BUFS": len(these),
                "BLOCK_W": block_w,
                "CHUNK": chunk,
            },
            num_warps=num_warps,
        )
        (out / f"{name}.ptx").write_text(ptx)

    spec = importlib.util.spec_from_file_location("compaction_naive_kernel", Path(__file__).with_name("compaction_naive_kernel.py"))
    naive = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(naive)
    buf = bufs[0]
    ptx = compile_ptx(
        naive.naive_compact_kernel,
        {"ptr": buf, "stride": buf.stride(0), "width": buf.shape[1], "row_ids_ptr": row_ids, "BLOCK_W": 64},
    )
    (out / "naive.ptx").write_text(ptx)
    (out / "meta.json").write_text(json.dumps({"triton": triton.__version__, "num_bufs": len(bufs), "tiles": tiles}))


if __name__ == "__main__":
    main(sys.argv[1])
