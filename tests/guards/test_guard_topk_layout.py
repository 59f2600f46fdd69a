"""Guard `topk-layout` on the real DeepSeek V3.2 MTP predictor of the installed vLLM (CPU).

The predictor, its shared top-k buffer and holders, `set_skip_topk` and `compact_topk_indices`
are vLLM's own. Its forward cannot finish on CPU (it starts with a Triton kernel, which this CPU
build lacks), but the guard observes a forward before the body runs, so `forward_step` calls the
real, guarded forward and asserts that CPU-only failure (and nothing else); the buffer is
untouched by it.
"""

from __future__ import annotations

import json
import re

import pytest
from guards_helpers import requires_vllm

pytestmark = [requires_vllm, pytest.mark.vllm]

torch = pytest.importorskip("torch")

QSL = [0, 4, 8, 12, 16]  # 4 requests, 4 query tokens each (1 sampled + 3 speculative)
LAST = [3, 7, 11, 15]  # token_indices_to_sample when nothing was rejected


def buffer_of(inner):
    return inner.layers["1"].mtp_block.self_attn.topk_indices_buffer


def fill_distinct(buf):
    buf.copy_(torch.arange(buf.numel(), dtype=buf.dtype).view_as(buf))
    return buf.clone()


def forward_step(cfg, inner, n_tokens, qsl=None, *, guard_errors_allowed=False):
    """One call of the real, guarded forward. It must fail the one way the CPU build makes it
    fail: its first Triton kernel launch (`_..._kernel[grid](...)`), which the CPU build leaves a
    plain function, so `TypeError: 'function' object is not subscriptable`. A violation the guard
    raises propagates; anything else fails the test. The guard must not have hit an error of its
    own in this step (unless the test injects one)."""
    import traceback

    from invariant_check.runtime_guards import runtime
    from vllm.forward_context import set_forward_context

    class Md:  # stands in for the attention backend's metadata: only query_start_loc is read
        query_start_loc = torch.tensor(qsl if qsl is not None else list(range(n_tokens + 1)), dtype=torch.int32)

    rep = runtime.reporter()
    errors_before = rep.guard_errors if rep is not None else 0
    hidden = cfg.speculative_config.draft_model_config.hf_config.hidden_size
    with set_forward_context({"draft.layer": Md()}, cfg, num_tokens=n_tokens):
        with pytest.raises(TypeError, match="'function' object is not subscriptable") as info:
            inner(input_ids=torch.zeros(n_tokens, dtype=torch.long), positions=torch.arange(n_tokens),
                  previous_hidden_states=torch.zeros(n_tokens, hidden, dtype=torch.bfloat16))
    where = traceback.extract_tb(info.tb)[-1]
    assert "/vllm/" in where.filename and re.search(r"_kernel\[", where.line or ""), (
        f"the forward failed elsewhere than at a Triton kernel launch: {where.filename}:{where.lineno}: {where.line}")
    if rep is not None and not guard_errors_allowed:
        assert rep.guard_errors == errors_before, "the guard hit an error of its own during the forward"


def propose(cfg, inner, *, compact=True, ids=LAST, reuse_steps=2, qsl=QSL, guard_errors_allowed=False):
    """The v1 proposer's call order for one proposal with index sharing."""
    inner.set_skip_topk(False)
    forward_step(cfg, inner, qsl[-1], qsl, guard_errors_allowed=guard_errors_allowed)
    inner.set_skip_topk(True)
    if compact:
        inner.compact_topk_indices(torch.tensor(ids, dtype=torch.int32))
    for _ in range(reuse_steps):
        forward_step(cfg, inner, len(qsl) - 1, list(range(len(qsl))), guard_errors_allowed=guard_errors_allowed)


def test_guards_wrap_the_real_v32_methods(v32, guards):
    cfg, model, inner = v32
    guards()
    cls = type(inner)
    assert cls.__module__ == "vllm.models.deepseek_v32.nvidia.mtp"
    for name in ("set_skip_topk", "compact_topk_indices", "forward"):
        assert getattr(cls.__dict__[name], "__invariant_check_wrapped__", False), name


def test_correct_sequence_passes_and_compacts(v32, guards):
    cfg, model, inner = v32
    rep = guards(mode="raise")
    buf = buffer_of(inner)
    before = fill_distinct(buf)
    propose(cfg, inner)
    assert torch.equal(buf[:4], before[LAST])
    assert rep.violations == 0 and rep.guard_errors == 0


def test_reuse_without_compaction_is_reported_with_class_step_tokens_requests(v32, guards):
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32
    rep = guards(mode="raise")
    fill_distinct(buffer_of(inner))
    with pytest.raises(InvariantViolation) as info:
        propose(cfg, inner, compact=False)
    exc = info.value
    assert isinstance(exc, AssertionError)
    assert exc.invariant == "reuse-before-compaction"
    assert "DeepseekV32MultiTokenPredictor" in str(exc)
    assert exc.values["step"] == 1 and exc.values["num_tokens"] == 16 and exc.values["num_requests"] == 4
    assert rep.guard_errors == 0


def test_drop_compaction_fault_is_caught_through_the_real_method(v32, guards, tmp_path):
    cfg, model, inner = v32
    rep = guards(mode="record", report_dir=tmp_path, faults=("drop-compaction",))
    buf = buffer_of(inner)
    before = fill_distinct(buf)
    propose(cfg, inner)  # calls compact_topk_indices, which the fault turns into a no-op
    assert torch.equal(buf, before)
    recs = [json.loads(line) for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    inv = [r["invariant"] for r in recs if r["kind"] == "violation"]
    assert inv == ["reuse-before-compaction"] and rep.violations == 1


@pytest.mark.parametrize(
    "ids, failed",
    [
        ([7, 3, 11, 15], "strictly increasing"),
        ([4, 7, 11, 15], "own request's query range"),
        ([3, 7, 11, 4000], "max slot id < buffer rows"),
        ([0, 0, 0, 0], "strictly increasing"),
    ],
)
def test_bad_slot_ids_are_rejected_before_the_gather(v32, guards, ids, failed):
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32
    guards(mode="raise")
    buf = buffer_of(inner)
    fill_distinct(buf)
    inner.set_skip_topk(False)
    forward_step(cfg, inner, 16, QSL)
    inner.set_skip_topk(True)
    with pytest.raises(InvariantViolation) as info:
        inner.compact_topk_indices(torch.tensor(ids, dtype=torch.int32))
    assert info.value.invariant == "compaction-input"
    assert any(failed in c for c in info.value.values["failed_conditions"])


@pytest.mark.parametrize(
    "ids, problem",
    [
        (torch.tensor([3.0, 7.0, 11.0, 15.0]), "integers"),
        (torch.tensor([[3, 7], [11, 15]]), "1-D"),
        (torch.tensor([3, 7, 11]), "3 slot ids for 4 requests"),
    ],
)
def test_bad_slot_id_shapes(v32, guards, ids, problem):
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32
    guards(mode="raise")
    fill_distinct(buffer_of(inner))
    inner.set_skip_topk(False)
    forward_step(cfg, inner, 16, QSL)
    with pytest.raises(InvariantViolation, match=problem):
        inner.compact_topk_indices(ids)


@pytest.mark.parametrize("fault", ["wrong-rows", "double-compaction"])
def test_wrong_compaction_result_is_caught(v32, guards, fault):
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32
    guards(mode="raise", faults=(fault,))
    fill_distinct(buffer_of(inner))
    with pytest.raises(InvariantViolation) as info:
        propose(cfg, inner)
    assert info.value.invariant == "compaction-result"
    assert info.value.values["wrong_rows"]  # names the rows that differ
    assert "topk_indices_buffer" in info.value.values["buffer"]


def test_second_compaction_in_one_proposal_is_reported(v32, guards):
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32
    guards(mode="raise")
    fill_distinct(buffer_of(inner))
    inner.set_skip_topk(False)
    forward_step(cfg, inner, 16, QSL)
    inner.set_skip_topk(True)
    inner.compact_topk_indices(torch.tensor(LAST, dtype=torch.int32))
    with pytest.raises(InvariantViolation) as info:
        inner.compact_topk_indices(torch.tensor(LAST, dtype=torch.int32))
    assert info.value.invariant == "compacted-twice"


def test_holders_share_one_storage_and_a_rebound_holder_is_caught(v32, guards):
    from invariant_check.runtime_guards import topk_layout
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32
    guards(mode="raise")
    holders = topk_layout.find_holders(inner)
    paths = {p for p, _ in holders}
    # MLA wrapper, its impl, the sparse-index group, the indexer and its op.
    assert {"layers.1.mtp_block.self_attn.topk_indices_buffer",
            "layers.1.mtp_block.self_attn.impl.topk_indices_buffer",
            "layers.1.mtp_block.self_attn.impl.index_group.logical_topk_indices",
            "layers.1.mtp_block.self_attn.indexer.topk_indices_buffer",
            "layers.1.mtp_block.self_attn.indexer.indexer_op.topk_indices_buffer"} <= paths
    topk_layout.check_holders(inner, "test")  # the real module is consistent
    indexer = inner.layers["1"].mtp_block.self_attn.indexer
    original = indexer.topk_indices_buffer
    try:
        indexer.topk_indices_buffer = original.clone()
        with pytest.raises(InvariantViolation) as info:
            topk_layout.check_holders(inner, "test")
        assert info.value.invariant == "holders-share-storage"
    finally:
        indexer.topk_indices_buffer = original
    group = inner.layers["1"].mtp_block.self_attn.impl.index_group
    try:
        # The sparse-index group reads only device/dtype/width of its buffer (the v2 runner
        # leaves it on the draft's own buffer): another storage is fine, another width is not.
        group.logical_topk_indices = original.clone()
        topk_layout.check_holders(inner, "test")
        group.logical_topk_indices = original[:, :4].clone()
        with pytest.raises(InvariantViolation, match="width"):
            topk_layout.check_holders(inner, "test")
    finally:
        group.logical_topk_indices = original
    topk_layout.check_holders(inner, "test")


def test_warn_mode_logs_once_per_site_and_goes_on(v32, guards, caplog):
    import logging

    cfg, model, inner = v32
    rep = guards(mode="warn")
    caplog.set_level(logging.WARNING, logger="invariant_check.guards")
    for _ in range(3):
        propose(cfg, inner, compact=False)
    assert rep.violations == 3
    warnings = [r for r in caplog.records if "reuse-before-compaction" in r.getMessage()]
    assert len(warnings) == 1


def test_guard_error_does_not_break_the_compaction_in_record_mode(v32, guards, tmp_path, monkeypatch):
    from invariant_check.runtime_guards import topk_layout

    cfg, model, inner = v32
    rep = guards(mode="record", report_dir=tmp_path)

    def broken(model):
        raise RuntimeError("bug inside the guard")

    monkeypatch.setattr(topk_layout, "distinct_buffers", broken)
    buf = buffer_of(inner)
    before = fill_distinct(buf)
    propose(cfg, inner, guard_errors_allowed=True)
    assert torch.equal(buf[:4], before[LAST])  # vLLM's own compaction still ran
    assert rep.guard_errors >= 1
    recs = [json.loads(line) for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert any(r["kind"] == "guard_error" and "bug inside the guard" in r["message"] for r in recs)


def test_guard_error_is_reraised_in_raise_mode(v32, guards, monkeypatch):
    from invariant_check.runtime_guards import topk_layout

    cfg, model, inner = v32
    guards(mode="raise")
    monkeypatch.setattr(topk_layout, "distinct_buffers", lambda m: 1 / 0)
    inner.set_skip_topk(False)
    with pytest.raises(ZeroDivisionError):
        inner.compact_topk_indices(torch.tensor(LAST, dtype=torch.int32))


def test_triton_compaction_swap_compacts_and_is_checked(v32, guards, monkeypatch):
    compaction = pytest.importorskip("invariant_check.compaction")
    cfg, model, inner = v32
    calls = []
    real = compaction.compact_topk_indices_

    def spy(module, slot_ids, **kwargs):
        calls.append(type(module).__name__)
        assert kwargs == {"missing_ok": False}  # the swap never lets a compaction find nothing
        return real(module, slot_ids, **kwargs)

    monkeypatch.setattr(compaction, "compact_topk_indices_", spy)
    rep = guards(mode="raise", compaction="triton")
    buf = buffer_of(inner)
    before = fill_distinct(buf)
    propose(cfg, inner)
    assert calls == ["DeepseekV32MultiTokenPredictor"]  # vLLM's own gather was replaced
    assert torch.equal(buf[:4], before[LAST])
    assert rep.violations == 0 and rep.guard_errors == 0


def test_triton_swap_without_guards_patches_only_the_compaction(v32, guards, monkeypatch):
    compaction = pytest.importorskip("invariant_check.compaction")
    cfg, model, inner = v32
    calls = []
    monkeypatch.setattr(compaction, "compact_topk_indices_", lambda m, ids, **kw: calls.append(ids.tolist()))
    guards(mode="raise", names=(), compaction="triton")
    cls = type(inner)
    assert getattr(cls.__dict__["compact_topk_indices"], "__invariant_check_wrapped__", False)
    assert not getattr(cls.__dict__["set_skip_topk"], "__invariant_check_wrapped__", False)
    inner.compact_topk_indices(torch.tensor(LAST, dtype=torch.int32))
    assert calls == [LAST]


def test_compaction_of_a_real_model_without_topk_buffer_names_it(v3_mtp):
    """vLLM's DeepSeek-V3 MTP has no sparse attention: its own compact_topk_indices returns
    having done nothing. Ours says so, naming the model, unless told none is expected."""
    from invariant_check.compaction import NoTopkBufferError, compact_topk_indices_

    cfg, model, inner = v3_mtp
    ids = torch.tensor([0, 1], dtype=torch.int32)
    assert inner.compact_topk_indices(ids) is None  # vLLM's: silent
    with pytest.raises(NoTopkBufferError) as info:
        compact_topk_indices_(inner, ids)
    assert "vllm.model_executor.models.deepseek_mtp.DeepSeekMultiTokenPredictor" in str(info.value)
    assert isinstance(info.value, LookupError) and info.value.module is inner
    assert compact_topk_indices_(inner, ids, missing_ok=True) is None


def test_triton_swap_on_a_model_without_topk_buffer_raises_naming_it(v3_mtp, guards):
    from invariant_check.compaction import NoTopkBufferError

    cfg, model, inner = v3_mtp
    ids = torch.tensor([0, 1], dtype=torch.int32)
    guards(mode="raise", names=(), compaction="triton")
    assert getattr(type(inner).__dict__["compact_topk_indices"], "__invariant_check_wrapped__", False)
    with pytest.raises(NoTopkBufferError, match="DeepSeekMultiTokenPredictor"):
        inner.compact_topk_indices(ids)
    guards(mode="raise", names=(), compaction="vllm")  # vLLM's own method: nothing to say
    assert inner.compact_topk_indices(ids) is None


def test_amd_variant_same_guarantees(v32_amd, guards):
    """The ROCm DeepSeek V3.2 MTP module (its own class, discovered separately): correct run,
    missing compaction, wrong rows, and its extra holder (a second indexer op)."""
    from invariant_check.runtime_guards import topk_layout
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32_amd
    assert type(inner).__module__ == "vllm.models.deepseek_v32.amd.mtp"
    rep = guards(mode="raise")
    assert getattr(type(inner).__dict__["compact_topk_indices"], "__invariant_check_wrapped__", False)
    buf = buffer_of(inner)
    before = fill_distinct(buf)
    propose(cfg, inner)
    assert torch.equal(buf[:4], before[LAST]) and rep.violations == 0
    assert "layers.1.mtp_block.self_attn.indexer_op.topk_indices_buffer" in {p for p, _ in topk_layout.find_holders(inner)}
    with pytest.raises(InvariantViolation, match="reuse mode"):
        propose(cfg, inner, compact=False)
    guards(mode="raise", faults=("wrong-rows",))
    fill_distinct(buf)
    with pytest.raises(InvariantViolation) as info:
        propose(cfg, inner)
    assert info.value.invariant == "compaction-result"


def test_violation_site_names_the_module(v32, v32_amd, guards, tmp_path):
    """Two classes named DeepseekV32MultiTokenPredictor (nvidia, amd): the site tells them apart."""
    guards(mode="record", report_dir=tmp_path)
    for cfg_model in (v32, v32_amd):
        cfg, _, inner = cfg_model
        fill_distinct(buffer_of(inner))
        propose(cfg, inner, compact=False)
    recs = [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]
    sites = {r["site"] for r in recs if r["kind"] == "violation"}
    assert sites == {"vllm.models.deepseek_v32.nvidia.mtp.DeepseekV32MultiTokenPredictor.forward",
                     "vllm.models.deepseek_v32.amd.mtp.DeepseekV32MultiTokenPredictor.forward"}
