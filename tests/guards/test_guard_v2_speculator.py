"""Guard `topk-layout` through the model-runner-v2 `MTPSpeculator` hooks (vLLM's own methods)
on the real DeepSeek V3.2 MTP predictor and its real buffer.

The v2 runner cannot run on CPU ("Model Runner V2 requires Triton"), so the speculator is created
without its __init__ and given the few attributes the hooks read; the CUDA-graph managers are
stand-ins (graph capture needs a GPU) that run the guarded forward the way a capture would.
"""

from __future__ import annotations

import importlib.util

import pytest
from guards_helpers import requires_vllm
from test_guard_topk_layout import LAST, QSL, buffer_of, fill_distinct, forward_step, propose

pytestmark = [requires_vllm, pytest.mark.vllm]

torch = pytest.importorskip("torch")


class _GraphManagerStandIn:
    """GPU-only in vLLM; here it only replays the guarded forward once per capture."""

    use_breakable_cg = False

    def __init__(self, run):
        self.run = run

    def capture(self, *args, **kwargs):
        self.run()


def make_speculator(cfg, model, inner, max_num_reqs=4, steps=3):
    from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator

    spec = MTPSpeculator.__new__(MTPSpeculator)
    spec.model = model
    spec.share_mtp_topk_indices = True
    spec.num_speculative_steps = steps
    spec.max_num_reqs = max_num_reqs
    spec.last_token_indices = torch.zeros(max_num_reqs, dtype=torch.int64)
    spec.idx_mapping = torch.zeros(max_num_reqs, dtype=torch.int32)
    spec.supports_decode_metadata_update = False
    for name in ("model_state", "target_input_buffers", "block_tables", "target_attn_groups",
                 "kv_cache_config", "input_buffers", "attn_groups"):
        setattr(spec, name, None)
    n = max_num_reqs * (steps + 1)
    spec.prefill_cudagraph_manager = _GraphManagerStandIn(
        lambda: forward_step(cfg, inner, n, list(range(0, n + 1, steps + 1))))
    spec.decode_cudagraph_manager = _GraphManagerStandIn(lambda: forward_step(cfg, inner, max_num_reqs))
    return spec


def test_v2_hooks_are_patched(v32, guards):
    from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator

    guards()
    for hook in ("on_prefill_end", "capture", "load_draft_model"):
        assert getattr(MTPSpeculator.__dict__[hook], "__invariant_check_wrapped__", False), hook


def test_capture_with_all_zero_ids_is_not_a_violation(v32, guards):
    cfg, model, inner = v32
    rep = guards(mode="raise")
    fill_distinct(buffer_of(inner))
    spec = make_speculator(cfg, model, inner)
    spec.capture()  # real MTPSpeculator.capture: on_prefill_end compacts with all-zero ids
    assert rep.violations == 0 and rep.guard_errors == 0


def test_all_zero_ids_outside_capture_are_a_violation(v32, guards):
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32
    guards(mode="raise")
    fill_distinct(buffer_of(inner))
    spec = make_speculator(cfg, model, inner)
    spec.on_prefill_begin(4)
    forward_step(cfg, inner, 16, QSL)
    with pytest.raises(InvariantViolation) as info:
        spec.on_prefill_end(4)  # last_token_indices still all zero
    assert info.value.invariant == "compaction-input"


def test_v2_proposal_through_real_hooks(v32, guards):
    cfg, model, inner = v32
    rep = guards(mode="raise")
    buf = buffer_of(inner)
    before = fill_distinct(buf)
    spec = make_speculator(cfg, model, inner)
    spec.on_prefill_begin(4)
    forward_step(cfg, inner, 16, QSL)
    spec.last_token_indices[:4] = torch.tensor(LAST)
    spec.on_prefill_end(4)
    spec.on_multi_step_decode_begin(4)
    for _ in range(2):
        forward_step(cfg, inner, 4)
    spec.on_multi_step_decode_end(4)
    assert torch.equal(buf[:4], before[LAST])
    assert rep.violations == 0 and rep.guard_errors == 0


def test_v2_without_compaction_is_reported(v32, guards):
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32
    guards(mode="raise", faults=("drop-compaction",))
    fill_distinct(buffer_of(inner))
    spec = make_speculator(cfg, model, inner)
    spec.on_prefill_begin(4)
    forward_step(cfg, inner, 16, QSL)
    spec.last_token_indices[:4] = torch.tensor(LAST)
    spec.on_prefill_end(4)
    spec.on_multi_step_decode_begin(4)
    with pytest.raises(InvariantViolation) as info:
        forward_step(cfg, inner, 4)
    assert info.value.values["num_requests"] == 4 and info.value.values["num_tokens"] == 16


def test_v2_graph_replayed_prefill_still_caught_by_order(v32, guards):
    """A FULL-graph prefill replays without a Python forward; order alone must still tell."""
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32
    guards(mode="raise", faults=("drop-compaction",))
    spec = make_speculator(cfg, model, inner)
    spec.on_prefill_begin(4)
    spec.on_prefill_end(4)
    spec.on_multi_step_decode_begin(4)
    # The decode steps are graph replays too; leaving reuse mode ends the proposal.
    with pytest.raises(InvariantViolation) as info:
        spec.on_multi_step_decode_end(4)
    assert info.value.invariant == "reuse-before-compaction"


def test_load_draft_model_checks_holders(v32, guards, monkeypatch):
    import vllm.v1.worker.gpu.spec_decode.mtp.speculator as spec_mod
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32
    guards(mode="raise")
    spec = make_speculator(cfg, model, inner)
    spec.vllm_config = cfg
    # Loading weights is out of scope here: the loader returns the already built model.
    monkeypatch.setattr(spec_mod, "load_eagle_model", lambda target, vllm_config: model)
    spec.load_draft_model(None, set())  # consistent holders: fine
    indexer = inner.layers["1"].mtp_block.self_attn.indexer
    original = indexer.topk_indices_buffer
    try:
        indexer.topk_indices_buffer = original.clone()  # a holder missed by the rebinding
        with pytest.raises(InvariantViolation, match="different storages"):
            spec.load_draft_model(None, set())
    finally:
        indexer.topk_indices_buffer = original


def test_shared_buffer_gathered_once_per_layer_is_caught_on_real_code(v32_two_layers, guards):
    """Model runner v2 points every draft holder at the target's one buffer
    (`load_eagle_model`). With two MTP layers, vLLM's own compact_topk_indices then gathers that
    buffer twice, and the second gather reads rows the first already overwrote. No fault
    injection: this is vLLM 0.32's code on a shared buffer."""
    from invariant_check.runtime_guards.errors import InvariantViolation

    cfg, model, inner = v32_two_layers
    assert sorted(inner.layers.keys()) == ["1", "2"]
    rep = guards(mode="raise")
    b1 = inner.layers["1"].mtp_block.self_attn.topk_indices_buffer
    b2 = inner.layers["2"].mtp_block.self_attn.topk_indices_buffer
    assert b1.data_ptr() != b2.data_ptr()
    fill_distinct(b1)
    fill_distinct(b2)
    propose(cfg, inner)  # one buffer per layer: each gathered once, correct
    assert rep.violations == 0

    originals = {}
    try:
        # The same rebinding loop as vLLM's load_eagle_model, with layer 1's buffer as "target".
        for name, module in inner.named_modules():
            if "topk_indices_buffer" in vars(module):
                originals[name] = module.topk_indices_buffer
                module.topk_indices_buffer = b1
        guards(mode="raise")  # fresh guard state: the holders changed
        # The loop repoints modules only; the impls read through their indexer and the
        # sparse-index group keeps its own buffer for sizing only: no false alarm here.
        from invariant_check.runtime_guards import topk_layout

        topk_layout.check_holders(inner, "test")
        assert {str(t.data_ptr()) for p, t in topk_layout.find_holders(inner)
                if p.startswith("layers.2") and p.endswith("topk_indices_buffer")} == {str(b1.data_ptr())}
        fill_distinct(b1)
        with pytest.raises(InvariantViolation) as info:
            propose(cfg, inner)
        assert info.value.invariant == "compaction-result"
        assert 0 in info.value.values["wrong_rows"]
        if importlib.util.find_spec("invariant_check.compaction") is not None:
            # The swapped-in compaction gathers each distinct buffer once: correct again.
            rep = guards(mode="raise", compaction="triton")
            before = fill_distinct(b1)
            propose(cfg, inner)
            assert torch.equal(b1[:4], before[LAST]) and rep.violations == 0
    finally:
        modules = dict(inner.named_modules())
        for name, buf in originals.items():
            modules[name].topk_indices_buffer = buf


def test_graph_replayed_prefill_is_not_compared_with_the_previous_batch(v32, guards):
    cfg, model, inner = v32
    rep = guards(mode="raise")
    fill_distinct(buffer_of(inner))
    spec = make_speculator(cfg, model, inner)
    spec.on_prefill_begin(4)
    forward_step(cfg, inner, 16, QSL)  # an eager prefill with 4 requests
    spec.last_token_indices[:4] = torch.tensor(LAST)
    spec.on_prefill_end(4)
    spec.on_multi_step_decode_begin(4)
    spec.on_multi_step_decode_end(4)
    spec.on_prefill_begin(2)  # next proposal: 2 requests, prefill replayed as a graph (no forward)
    spec.last_token_indices[:2] = torch.tensor([3, 7])
    spec.on_prefill_end(2)
    assert rep.violations == 0
