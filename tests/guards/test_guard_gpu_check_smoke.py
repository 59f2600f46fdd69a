"""bench/guards_gpu_check.py has not run on a GPU yet; its CPU smoke mode runs the same sequence
(deferred read-back forced, no sync or graph checks) so that the one GPU run does not fail on
the script itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]


def test_gpu_check_script_cpu_smoke():
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVARIANT_CHECK_")}
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "guards_gpu_check.py"), "--cpu-smoke"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "FAIL" not in proc.stdout and proc.stdout.rstrip().endswith("SMOKE OK")
    assert "GPU-only checks NOT RUN" in proc.stdout  # a smoke run does not read as a GPU result
    assert proc.stdout.count("PASS") >= 15 and "PASS pad-tail" in proc.stdout
    assert "PASS coherence stale max_seq_len: reported at next proposal" in proc.stdout
