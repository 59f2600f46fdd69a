"""The GPU benchmark script runs end to end (tiny, interpreted, on CPU), so its one GPU run counts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

REPO = Path(__file__).resolve().parent.parent.parent


def test_bench_script_cpu_smoke():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "compaction_gpu.py"), "--cpu-smoke"],
        env=env, capture_output=True, text=True, check=False, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    for heading in ("## Correctness", "## Timings", "## Stress", "## Config sweep", "## Targets"):
        assert heading in out
    assert "**NO**" not in out
    assert "| correctness (timed shapes) | 6/6 | PASS |" in out
    assert "| stress: triton mismatches | 0 | PASS |" in out
