"""IC003's fix on a model that has top-k buffers: the method `--fix` adds, run on the real
DeepSeek V3.2 MTP predictor of the installed vLLM (built on CPU with dummy weights, its real
shared `topk_indices_buffer`s), gathers what vLLM's own `compact_topk_indices` gathers.

The method is the fix builder's own text (`rules/_fixes/ic003.py`), compiled and bound to the
real predictor: on vLLM 0.24.0 it is what the fixed `DeepSeekMultiTokenPredictor` gets; here it
runs on the buffers vLLM 0.32.0 allocates, next to the method vLLM shipped for the same bug.
"""

from __future__ import annotations

import types

import pytest
from guards_helpers import requires_vllm

from invariant_check.rules._fixes.ic003 import method_source

pytestmark = [requires_vllm, pytest.mark.vllm]

torch = pytest.importorskip("torch")


def _fixed_method(room: int = 80):
    namespace = {"torch": torch}
    exec(compile(method_source("compact_topk_indices", "set_skip_topk", True, room=room), "<ic003 fix>", "exec"), namespace)
    return namespace["compact_topk_indices"]


def _distinct_storages(inner) -> list:
    from invariant_check.compaction.modules import find_topk_buffers

    seen, out = set(), []
    for buf in find_topk_buffers(inner, refresh=True):
        if buf.data_ptr() not in seen:
            seen.add(buf.data_ptr())
            out.append(buf)
    return out


def _fill(buffers) -> list:
    start = []
    for i, buf in enumerate(buffers):
        rows, cols = buf.shape
        values = torch.arange(rows * cols, dtype=torch.int64).reshape(rows, cols) + 1000 * (i + 1)
        buf.copy_(values.to(buf.dtype))
        start.append(buf.clone())
    return start


@pytest.mark.parametrize("model", ["v32", "v32_two_layers"])
def test_the_fixed_method_gathers_what_vllm_gathers_on_real_buffers(model, request):
    _cfg, _top, inner = request.getfixturevalue(model)
    buffers = _distinct_storages(inner)
    assert buffers, "the real V3.2 predictor has a top-k buffer"
    slot_ids = torch.tensor([3, 0, 7], dtype=torch.int64)  # one row per request, out of order

    start = _fill(buffers)
    inner.set_skip_topk(True)
    inner.compact_topk_indices(slot_ids)  # vLLM's own method (0.25.0 on)
    by_vllm = [b.clone() for b in buffers]

    for buf, before in zip(buffers, start):
        buf.copy_(before)
    types.MethodType(_fixed_method(), inner)(slot_ids)  # the method IC003's fix writes
    inner.set_skip_topk(False)
    by_fix = [b.clone() for b in buffers]

    for before, vllm_result, fix_result in zip(start, by_vllm, by_fix):
        # the rows of slot_ids at the front, the rest untouched
        assert torch.equal(fix_result[:3], before[slot_ids])
        assert torch.equal(fix_result[3:], before[3:])
        assert torch.equal(fix_result, vllm_result)


def test_a_buffer_shared_by_every_holder_is_gathered_once(v32):
    """The predictor's attention, its impl and its indexer hold one storage: a method that
    gathered each holder would permute the rows again (rows 3, 0, 7 of rows 3, 0, 7)."""
    _cfg, _top, inner = v32
    held = [
        getattr(holder, "topk_indices_buffer", None)
        for module in inner.modules()
        for holder in (module, getattr(module, "impl", None))
    ]
    held = [b for b in held if isinstance(b, torch.Tensor)]
    assert len(held) > 1 and len({b.data_ptr() for b in held}) == 1, "several holders share one buffer"
    (buf,) = _distinct_storages(inner)
    (before,) = _fill([buf])
    slot_ids = torch.tensor([3, 0, 7], dtype=torch.int64)
    types.MethodType(_fixed_method(), inner)(slot_ids)
    assert torch.equal(buf[:3], before[slot_ids])
