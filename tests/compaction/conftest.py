"""Interpreted copies of the compaction kernels, without leaking TRITON_INTERPRET.

TRITON_INTERPRET is read when ``@triton.jit`` runs, so it is set only while the
kernel modules are imported and restored at once: other test modules (vLLM
end-to-end runs that spawn workers) must never see it. triton itself, and
the gluon package it imports lazily, are imported first in compiled mode so
that their own jitted helpers stay compiled-mode for everyone else.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

HERE = Path(__file__).resolve().parent
# The helper modules (compaction_*.py) import by name under any --import-mode: tests/compaction
# is on pytest's pythonpath (pyproject.toml).
KERNEL_MODULE = "invariant_check.compaction.kernel"
NAIVE_PATH = HERE / "compaction_naive_kernel.py"


def _load_by_path(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def interp():
    pytest.importorskip("triton")
    import triton
    import triton.language

    try:
        import triton.experimental.gluon  # noqa: F401
    except ImportError:
        pass
    from invariant_check import compaction
    from invariant_check.compaction import api

    saved_module = sys.modules.pop(KERNEL_MODULE, None)
    saved_attr = compaction.__dict__.get("kernel")
    saved_cached = api._kernel
    saved_env = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        kernel = importlib.import_module(KERNEL_MODULE)
        naive = _load_by_path("compaction_naive_kernel_interp", NAIVE_PATH)
    finally:
        if saved_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_env
    assert kernel.is_interpreted()
    api._kernel = kernel
    try:
        yield SimpleNamespace(kernel=kernel, naive=naive)
    finally:
        api._kernel = saved_cached
        if saved_module is None:
            sys.modules.pop(KERNEL_MODULE, None)
        else:
            sys.modules[KERNEL_MODULE] = saved_module
        if saved_attr is None:
            compaction.__dict__.pop("kernel", None)
        else:
            compaction.kernel = saved_attr


@pytest.fixture
def reversed_programs(monkeypatch):
    """Make the interpreter run a launch's programs last-to-first (or in any given order).

    The interpreter walks ``range(grid[0])`` and announces each program through
    ``interpreter_builder.set_grid_idx``; remapping that index runs the same
    programs, one at a time, in another order.
    """
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    original = builder.set_grid_idx
    state = {"order": None, "seen": []}

    def set_grid_idx(x, y, z):
        nx = builder.grid_dim[0]
        order = state["order"] or list(range(nx - 1, -1, -1))
        assert len(order) == nx and sorted(order) == list(range(nx)), "order must permute the grid"
        state["seen"].append(order[x])
        original(order[x], y, z)

    monkeypatch.setattr(builder, "set_grid_idx", set_grid_idx)
    return state
