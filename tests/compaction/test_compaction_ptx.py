"""The barrier survives compilation: sm_90 PTX built on this CPU-only machine.

The interpreter treats ``tl.debug_barrier`` as a no-op, so only the compiled
code can show that every thread's loads of a chunk come before any thread's
stores of it. ``triton.compile`` with a CUDA target needs no GPU; the probe
runs in its own process so it gets compiled-mode Triton.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MEMORY_OP = re.compile(r"^\s*(?:@%p\d+\s+)?(ld\.global|st\.global|bar\.sync)\b")


def memory_events(ptx: str) -> list[tuple[int, str]]:
    """(line number, op) for global loads, global stores and CTA barriers, in text order."""
    events = []
    for number, line in enumerate(ptx.splitlines(), 1):
        match = MEMORY_OP.match(line)
        if match:
            events.append((number, match.group(1)))
    return events


def unbarriered_stores(ptx: str) -> list[int]:
    """Lines of global stores whose nearest preceding global load has no barrier after it.

    Loops are laid out as one contiguous block in PTX, so text order is the order
    within an iteration; the wrap-around from one chunk's stores to the next
    chunk's loads is safe by construction (see kernel.py).
    """
    bad = []
    last = None
    for number, op in memory_events(ptx):
        if op == "st.global" and last == "ld.global":
            bad.append(number)
        if op != "st.global":
            last = op
    return bad


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    out = tmp_path_factory.mktemp("ptx")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # silences a deprecation warning only
    env["TRITON_CACHE_DIR"] = str(out / "cache")
    proc = subprocess.run(
        [sys.executable, str(HERE / "compaction_ptx_probe.py"), str(out)],
        env=env, capture_output=True, text=True, check=False, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {
        "band": (out / "band.ptx").read_text(),
        "band_default": (out / "band_default.ptx").read_text(),
        "band_int32": (out / "band_int32.ptx").read_text(),
        "naive": (out / "naive.ptx").read_text(),
        "meta": json.loads((out / "meta.json").read_text()),
    }


def test_ptx_targets_sm_90(ptx):
    assert re.search(r"^\.target\s+sm_90a?\b", ptx["band"], re.MULTILINE)


@pytest.mark.parametrize("variant", ["band", "band_default", "band_int32"])
def test_barrier_sits_between_every_load_and_store(ptx, variant):
    events = memory_events(ptx[variant])
    ops = [op for _, op in events]
    assert ops.count("ld.global") and ops.count("st.global")
    assert unbarriered_stores(ptx[variant]) == []
    # One load / barrier / store sequence per buffer: each buffer's first store
    # comes after a barrier that itself comes after that buffer's loads.
    first_bar_after_load = [
        i for i in range(1, len(ops)) if ops[i] == "bar.sync" and ops[i - 1] == "ld.global"
    ]
    assert len(first_bar_after_load) >= (1 if variant == "band_int32" else ptx["meta"]["num_bufs"])


@pytest.mark.parametrize("variant", ["band", "band_default", "band_int32"])
def test_int32_rows_move_as_16_byte_vectors(ptx, variant):
    # Full-width bands of an aligned int32 buffer: 4 x 32-bit per access, the
    # pattern that the bandwidth target depends on.
    assert "ld.global.v4.b32" in ptx[variant]
    assert "st.global.v4.b32" in ptx[variant]


def test_int32_buffer_needs_no_shared_memory_shuffle(ptx):
    # With the tiles an H100/H200 picks, loads and stores share one register
    # layout: no round trip through shared memory between the barrier and the stores.
    assert "st.shared" not in ptx["band_int32"]


def test_check_catches_the_naive_kernel(ptx):
    # Same check on the row-per-program kernel, which has no barrier: it must fail.
    assert "bar.sync" not in ptx["naive"]
    assert unbarriered_stores(ptx["naive"]) != []


def test_check_catches_a_barrier_placed_after_the_stores(ptx):
    # Moving the band kernel's barriers after its stores must be caught too.
    lines = ptx["band"].splitlines()
    bars = [i for i, l in enumerate(lines) if MEMORY_OP.match(l) and "bar.sync" in l]
    moved = [l for l in lines if "bar.sync" not in l] + [lines[i] for i in bars]
    assert unbarriered_stores("\n".join(moved)) != []
