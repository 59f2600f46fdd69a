"""vLLM's own Triton kernels on CPU, through Triton's interpreter.

The CPU build of vLLM replaces `triton`/`tl` by placeholders (`vllm.triton_utils`), so a kernel
such as `compute_token_to_req_indices` (which fills `CommonAttentionMetadata`'s token-to-request
memo) cannot run. `interpreted(module)` executes the installed vLLM module's own file again, with
the real Triton bound where it imports it and TRITON_INTERPRET=1 while its `@triton.jit` run, and
returns that copy. TRITON_INTERPRET is restored at once: other tests (vLLM engines that spawn
workers) must never see it.

Triton's own `@triton.jit` helpers (`tl.sum`, `tl.max`, ...) were made when triton was imported,
in compiled mode, and refuse to run in the interpreter; `interpreting()` swaps them for
interpreted twins only while a kernel of the copy runs (`interpreted_call`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os

import pytest


def interpreted(module_name: str):
    pytest.importorskip("triton")
    import triton
    import triton.language as tl
    import vllm.triton_utils as tu

    try:
        import triton.experimental.gluon
    except ImportError:
        pass
    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.origin, module_name
    copy_spec = importlib.util.spec_from_file_location(f"{module_name}__interpreted", spec.origin)
    module = importlib.util.module_from_spec(copy_spec)
    saved = {k: getattr(tu, k) for k in ("triton", "tl")}
    saved_env = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    tu.triton, tu.tl = triton, tl
    try:
        copy_spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            setattr(tu, k, v)
        if saved_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_env
    return module


@contextlib.contextmanager
def interpreting():
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    saved = {}
    for pkg in (tl, tl.math):
        for name, value in vars(pkg).items():
            if isinstance(value, JITFunction):
                saved[(pkg, name)] = value
                setattr(pkg, name, InterpretedFunction(value.fn))
    try:
        yield
    finally:
        for (pkg, name), value in saved.items():
            setattr(pkg, name, value)


def interpreted_call(fn):
    """fn (a launcher of an interpreted copy) with Triton's helpers interpreted around each call."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with interpreting():
            return fn(*args, **kwargs)

    return call
