"""The package works without triton, and the interpreter setting never leaks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the subprocesses import it; a lint-only install skips this module

REPO = Path(__file__).resolve().parent.parent.parent


def _run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, check=False, timeout=120)


def test_import_and_torch_backend_work_when_triton_cannot_be_imported():
    proc = _run("""
        import sys
        class NoTriton:
            def find_spec(self, name, path=None, target=None):
                if name == "triton" or name.startswith("triton."):
                    raise ImportError("triton blocked for this test")
        sys.meta_path.insert(0, NoTriton())
        import torch
        import invariant_check.compaction as c
        buf = torch.arange(12, dtype=torch.int32).reshape(6, 2)
        c.compact_rows_(buf, torch.tensor([1, 3, 5]))          # auto -> torch on CPU
        c.compact_rows_(buf, torch.tensor([0]), backend="torch")
        assert buf[:3].tolist() == [[2, 3], [6, 7], [10, 11]], buf
        assert not any(m == "triton" or m.startswith("triton.") for m in sys.modules)
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_importing_the_package_does_not_import_triton():
    proc = _run("""
        import sys
        import invariant_check.compaction
        print("triton" in sys.modules)
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"


def test_interpreter_setting_does_not_leak(interp):
    # The interpreted kernel is loaded and usable, yet the variable is gone and
    # triton's own jitted helpers are still the compiled-mode ones.
    import torch
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    from invariant_check.compaction import compact_rows_

    assert "TRITON_INTERPRET" not in os.environ
    assert isinstance(tl.cdiv, JITFunction)
    buf = torch.arange(12, dtype=torch.int32).reshape(6, 2)
    compact_rows_(buf, torch.tensor([1, 3, 5]), backend="triton")
    assert buf[:3].tolist() == [[2, 3], [6, 7], [10, 11]]
    assert "TRITON_INTERPRET" not in os.environ
