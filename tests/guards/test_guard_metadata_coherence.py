"""Guard `metadata-coherence` on vLLM 0.32's own objects, on CPU.

v1: the real `SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata` with real
`CommonAttentionMetadata`, and the draft steps advanced by vLLM's own
`_update_positions_dependent_metadata` (its CPU kernels, registered as in a vLLM worker). The
metadata builders are stand-ins (the real ones need a GPU backend); the invariant is about the
common metadata they are handed.

Model runner v2 (which does not run on CPU): the real `MTPSpeculator._build_uniform_attn_metadata`
/ `_build_attn_metadata` and the real `build_attn_metadata`, on a speculator created without its
__init__ and given the buffers it reads (no attention groups, so nothing GPU-only is built); the
real `_copy_request_inputs` for `pad-tail`.
"""

from __future__ import annotations

import json
import types

import pytest
from guards_helpers import requires_vllm

pytestmark = [requires_vllm, pytest.mark.vllm]

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from guards_draft_steps import (  # noqa: E402 - needs torch
    BLOCK,
    SEQ,
    TABLE,
    make_proposer,
    register_cpu_kernels,
    run_draft_steps,
    slot_of,
    step0_metadata,
)

V1_SITE = "vllm.v1.spec_decode.llm_base_proposer.SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata"


@pytest.fixture(scope="module", autouse=True)
def cpu_kernels():
    register_cpu_kernels()


def test_targets_are_patched(guards):
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    guards()
    build = SpecDecodeBaseProposer.__dict__["build_per_group_and_layer_attn_metadata"]
    # Two guards wrap the builder: each once, in one chain.
    assert build.__invariant_check_guards__ == {"group-metadata", "metadata-coherence"}
    assert getattr(SpecDecodeBaseProposer.__dict__["propose"], "__invariant_check_wrapped__", False)


def test_real_draft_steps_are_coherent(guards):
    rep = guards(mode="raise")
    p = make_proposer()
    cad = run_draft_steps(p, step0_metadata(p))
    assert cad.seq_lens.tolist() == [s + 2 for s in SEQ] and cad.max_seq_len == max(SEQ) + 2
    assert rep.violations == 0 and rep.guard_errors == 0


def test_stale_max_seq_len_fault_is_reported_with_field_step_row_and_values(guards):
    from invariant_check.runtime_guards.errors import InvariantViolation

    guards(mode="raise", faults=("stale-max-seq-len",))
    p = make_proposer()
    with pytest.raises(InvariantViolation) as info:
        run_draft_steps(p, step0_metadata(p))
    v = info.value.values
    assert info.value.guard == "metadata-coherence" and info.value.invariant == "max-seq-len"
    assert v["field"] == "max_seq_len" and v["draft_step"] == 1 and v["row"] == 2
    assert v["max_seq_len"] == 50 and v["seq_lens[row]"] == 51
    assert "max_seq_len" in str(info.value) and "draft step 1" in str(info.value) and "row 2" in str(info.value)


def test_the_0_13_loop_shape_is_caught_without_the_fault(guards):
    """vLLM 0.13's draft loop: `seq_lens += 1` with the CPU shadow, `max_seq_len` untouched."""
    from invariant_check.runtime_guards.errors import InvariantViolation

    guards(mode="raise")
    p = make_proposer()
    cad = step0_metadata(p, seq=[20, 50, 33])
    p.build_per_group_and_layer_attn_metadata(cad, draft_index=0)
    cad.seq_lens += 1
    cad.seq_lens_cpu_upper_bound += 1
    with pytest.raises(InvariantViolation) as info:
        p.build_per_group_and_layer_attn_metadata(cad, draft_index=1)
    assert info.value.invariant == "max-seq-len" and info.value.values["row"] == 1


def test_stale_slot_mapping_names_row_token_position_and_both_slots(guards):
    from invariant_check.runtime_guards.errors import InvariantViolation

    guards(mode="raise")
    p = make_proposer()
    kept = {}

    def keep_old_slots(k, cad):  # as if the step advanced positions but not the slot mapping
        if k == 1:
            kept["old"] = cad.slot_mapping.clone()
        else:
            cad.slot_mapping = kept["old"]

    with pytest.raises(InvariantViolation) as info:
        run_draft_steps(p, step0_metadata(p), between=keep_old_slots)
    v = info.value.values
    assert info.value.invariant == "slot-mapping" and v["draft_step"] == 2 and v["row"] == 0
    assert v["position"] == SEQ[0] + 1 and v["token"] == 0
    assert v["slot_mapping[t]"] == slot_of(0, SEQ[0]) and v["bad_rows"] == 3
    expected_key = next(k for k in v if k.startswith("block_table[row"))
    assert v[expected_key] == slot_of(0, SEQ[0] + 1)


def test_rows_past_max_model_len_hold_the_padding_slot_and_are_not_checked(guards):
    rep = guards(mode="raise")
    p = make_proposer(max_model_len=50)  # request 2 reaches it at draft step 1: vLLM writes PAD
    cad = run_draft_steps(p, step0_metadata(p), steps=2)
    assert cad.slot_mapping.tolist()[2] == -1
    assert rep.violations == 0


@pytest.mark.parametrize("corrupt, invariant, field, row", [
    (lambda cad: cad.query_start_loc.copy_(torch.tensor([0, 4, 3, 12], dtype=torch.int32)),
     "query-start-loc", "query_start_loc", 1),
    (lambda cad: setattr(cad, "num_actual_tokens", 11), "query-start-loc", "query_start_loc", 3),
    (lambda cad: cad.seq_lens_cpu_upper_bound.sub_(2), "seq-lens-upper-bound", "seq_lens_cpu_upper_bound", 0),
])
def test_each_field_is_named(guards, tmp_path, corrupt, invariant, field, row):
    rep = guards(mode="record", report_dir=tmp_path)
    p = make_proposer()
    cad = step0_metadata(p)
    corrupt(cad)
    p.build_per_group_and_layer_attn_metadata(cad, draft_index=1)
    recs = [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]
    found = [r for r in recs if r["kind"] == "violation" and r["invariant"] == invariant]
    assert found and rep.violations >= 1
    assert {r["values"]["field"] for r in found} >= {field}
    first = next(r for r in found if r["values"]["field"] == field)
    assert first["values"]["row"] == row and first["values"]["draft_step"] == 1
    assert first["site"] == V1_SITE


def test_step_zero_accepts_a_token_count_padded_for_a_cuda_graph(guards):
    rep = guards(mode="raise")
    p = make_proposer()
    cad = step0_metadata(p)
    cad.num_actual_tokens = 16  # the target's padded count; query_start_loc ends at 12
    p.build_per_group_and_layer_attn_metadata(cad, draft_index=0)
    assert rep.violations == 0


def test_device_results_wait_for_the_next_proposal(guards, monkeypatch):
    """Deferred read-back (what happens on a GPU), forced on CPU tensors."""
    from invariant_check.runtime_guards import deferred
    from invariant_check.runtime_guards.errors import InvariantViolation

    rep = guards(mode="raise", faults=("stale-max-seq-len",))
    monkeypatch.setattr(deferred, "immediate", lambda t: False)
    p = make_proposer()
    run_draft_steps(p, step0_metadata(p))  # nothing raised inside the draft steps
    assert rep.violations == 0
    with pytest.raises(InvariantViolation) as info:
        p.propose()  # the next proposal reads the results back before vLLM's body runs
    assert info.value.invariant == "max-seq-len" and info.value.values["draft_step"] == 1


def test_nothing_is_checked_while_a_cuda_graph_is_captured(guards, monkeypatch):
    from invariant_check.runtime_guards import deferred

    rep = guards(mode="raise", faults=("stale-max-seq-len",))
    monkeypatch.setattr(deferred, "capturing", lambda: True)
    p = make_proposer()
    run_draft_steps(p, step0_metadata(p))
    assert rep.violations == 0


# ---------------------------------------------------------------------------- model runner v2

V2_SITE = "vllm.v1.worker.gpu.spec_decode.speculator.build_attn_metadata"


def make_speculator(rows=4, seq=SEQ, max_model_len=256):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator

    s = MTPSpeculator.__new__(MTPSpeculator)
    s.arange_np = np.arange(64)
    s.max_model_len = s.draft_max_seq_len = max_model_len
    s.dcp_size = 1
    s.draft_is_prefilling = torch.zeros(rows, dtype=torch.bool)
    s.attn_groups = [[]]  # no backend to build for: build_attn_metadata returns {}
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)
    s.kv_cache_config = KVCacheConfig(num_blocks=16, kv_cache_tensors=[],
                                      kv_cache_groups=[KVCacheGroupSpec(["draft.attn"], spec)])
    table = torch.zeros(rows, 4, dtype=torch.int32)
    table[: len(TABLE)] = torch.tensor(TABLE, dtype=torch.int32)
    n = len(seq)
    positions = torch.zeros(64, dtype=torch.int64)
    positions[:n] = torch.tensor([s_ - 1 for s_ in seq])  # decode: one token per request
    slots = torch.full((1, 64), -1, dtype=torch.int64)
    slots[0, :n] = torch.tensor([slot_of(r, s_ - 1) for r, s_ in enumerate(seq)])
    qsl = torch.full((rows + 1,), n, dtype=torch.int32)  # padded rows repeat the end
    qsl[: n + 1] = torch.arange(n + 1, dtype=torch.int32)
    seq_lens = torch.zeros(rows, dtype=torch.int32)
    seq_lens[:n] = torch.tensor(seq, dtype=torch.int32)
    s.block_tables = types.SimpleNamespace(input_block_tables=[table], slot_mappings=slots, block_sizes=[BLOCK],
                                           cp_size=1)
    s.input_buffers = types.SimpleNamespace(query_start_loc=qsl, seq_lens=seq_lens, positions=positions)
    return s


def v2_build(s, mode="NONE", num_tokens=None, num_reqs_padded=None, upper=None, step=1):
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

    n = len(SEQ)
    desc = BatchExecutionDescriptor(cg_mode=getattr(CUDAGraphMode, mode), num_tokens=num_tokens or n,
                                    num_reqs=num_reqs_padded)
    ub = torch.tensor(SEQ if upper is None else upper, dtype=torch.int32) - step
    return s._build_uniform_attn_metadata(desc, n, 1, ub, step)


def test_v2_targets_are_patched(guards):
    import vllm.v1.worker.gpu.spec_decode.mtp.speculator  # noqa: F401 - imports its base classes
    import vllm.v1.worker.gpu.spec_decode.speculator as spec_mod
    from invariant_check.runtime_guards.patcher import REGISTRY

    guards()
    assert getattr(spec_mod.build_attn_metadata, "__invariant_check_wrapped__", False)
    for target in ("vllm.v1.worker.gpu.spec_decode.speculator:build_attn_metadata",
                   "vllm.v1.worker.gpu.spec_decode.speculator:DraftModelSpeculator._build_attn_metadata",
                   "vllm.v1.worker.gpu.spec_decode.speculator:DraftModelSpeculator._copy_request_inputs",
                   "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator:TargetDependentARSpeculator.propose"):
        assert REGISTRY.is_patched(target), target


def test_v2_coherent_build_passes(guards):
    rep = guards(mode="raise")
    assert v2_build(make_speculator()) == {}
    assert v2_build(make_speculator(), mode="FULL", num_tokens=4, num_reqs_padded=4) == {}
    assert rep.violations == 0 and rep.guard_errors == 0


def test_v2_seq_len_beyond_max_seq_len(guards):
    from invariant_check.runtime_guards.errors import InvariantViolation

    guards(mode="raise")
    s = make_speculator(max_model_len=40)
    with pytest.raises(InvariantViolation) as info:
        v2_build(s, upper=[20, 33, 40])
    v = info.value.values
    assert info.value.invariant == "max-seq-len" and v["row"] == 2 and v["draft_step"] == 1
    assert v["max_seq_len"] == 40 and v["seq_lens[row]"] == 50


def test_v2_stale_slot_mapping_and_upper_bound(guards, tmp_path):
    rep = guards(mode="record", report_dir=tmp_path)
    s = make_speculator()
    s.block_tables.slot_mappings[0, 1] += 1
    v2_build(s, upper=[20, 30, 50])
    recs = [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]
    by_inv = {r["invariant"]: r for r in recs if r["kind"] == "violation"}
    assert set(by_inv) == {"slot-mapping", "seq-lens-upper-bound"} and rep.violations == 2
    assert by_inv["slot-mapping"]["values"]["row"] == 1 and by_inv["slot-mapping"]["site"] == V2_SITE
    assert by_inv["seq-lens-upper-bound"]["values"]["row"] == 1
    assert by_inv["seq-lens-upper-bound"]["values"]["seq_lens_cpu_upper_bound[row]"] == 30


def test_v2_unpadded_build_must_end_at_the_token_count(guards):
    from invariant_check.runtime_guards.errors import InvariantViolation

    guards(mode="raise")
    s = make_speculator()
    s.input_buffers.query_start_loc[3] = 2  # the last request lost its token
    with pytest.raises(InvariantViolation) as info:
        v2_build(s)
    assert info.value.invariant == "query-start-loc"


@pytest.mark.parametrize("rank", [0, 1])
def test_v2_dcp_local_lengths_own_kernel_clean_and_stale_reported(guards, monkeypatch, rank):
    """Under DCP the speculator recomputes the local lengths with its own Triton kernel (run
    through Triton's interpreter here): the guard's expectation, vLLM's get_dcp_local_seq_lens,
    agrees with it; the lengths of the step before (what a caller could pass) are reported."""
    import vllm.v1.worker.gpu.spec_decode.speculator as spec_mod
    from guards_vllm_triton import interpreted, interpreted_call
    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

    from invariant_check.runtime_guards.errors import InvariantViolation

    cp = interpreted("vllm.v1.worker.gpu.cp_utils")
    monkeypatch.setattr(spec_mod, "prepare_dcp_local_seq_lens", interpreted_call(cp.prepare_dcp_local_seq_lens))
    rep = guards(mode="raise")
    s = make_speculator()
    s.dcp_size = 2
    s.block_tables.cp_size, s.block_tables.cp_rank, s.block_tables.cp_interleave = 2, rank, 1
    s.input_buffers.dcp_local_seq_lens = torch.zeros(4, dtype=torch.int32)
    v2_build(s)
    assert s.input_buffers.dcp_local_seq_lens[:3].tolist() == get_dcp_local_seq_lens(
        torch.tensor(SEQ), 2, rank).tolist()
    assert rep.violations == 0 and rep.guard_errors == 0
    stale = get_dcp_local_seq_lens(torch.tensor(SEQ, dtype=torch.int32) - 1, 2, rank)
    stale = torch.cat([stale, torch.zeros(1, dtype=torch.int32)])
    desc = BatchExecutionDescriptor(cg_mode=CUDAGraphMode.NONE, num_tokens=len(SEQ), num_reqs=None)
    with pytest.raises(InvariantViolation) as info:
        s._build_uniform_attn_metadata(desc, len(SEQ), 1, torch.tensor(SEQ, dtype=torch.int32) - 1, 1,
                                       dcp_local_seq_lens=stale)
    v = info.value.values
    first = next(i for i, x in enumerate(SEQ) if (x - 1) % 2 == rank)  # the rank that got the token
    assert info.value.invariant == "dcp-local-seq-lens" and v["row"] == first and v["dcp_rank"] == rank
    assert v["expected[row]"] == v["dcp_local_seq_lens[row]"] + 1


# ---------------------------------------------------------------------------- pad-tail


def make_copy_target(rows=6):
    from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator

    s = MTPSpeculator.__new__(MTPSpeculator)
    s.temperature = torch.zeros(rows)
    s.seeds = torch.zeros(rows, dtype=torch.int64)
    s.idx_mapping = torch.arange(rows, dtype=torch.int32) + 10  # stale rows from an earlier batch
    return s


def test_pad_tail_real_0_32_code_is_clean(guards):
    rep = guards(mode="raise")
    s = make_copy_target()
    s._copy_request_inputs(2, torch.tensor([4, 1], dtype=torch.int32), torch.ones(6), torch.ones(6, dtype=torch.int64))
    assert s.idx_mapping.tolist() == [4, 1, -1, -1, -1, -1]
    s._copy_request_inputs(2, torch.tensor([4, 1], dtype=torch.int32), torch.ones(6), torch.ones(6, dtype=torch.int64),
                           dummy_run=True)
    assert rep.violations == 0 and rep.guard_errors == 0


def test_pad_tail_left_stale_as_in_0_24_is_reported(guards):
    """vLLM 0.24's body (PR #47066): only the real rows are written; our fixture, same shape."""
    from invariant_check.runtime_guards import metadata_coherence
    from invariant_check.runtime_guards.errors import InvariantViolation
    from invariant_check.runtime_guards.patcher import patch_method

    guards(mode="raise")

    class Speculator024:
        def __init__(self, rows=6, draft_logits=True):
            self.temperature, self.seeds = torch.zeros(rows), torch.zeros(rows, dtype=torch.int64)
            self.idx_mapping = torch.arange(rows, dtype=torch.int32) + 10
            self.draft_logits = torch.zeros(1) if draft_logits else None

        def _copy_request_inputs(self, num_reqs, idx_mapping, temperature, seeds):
            self.temperature.copy_(temperature)
            self.seeds.copy_(seeds)
            self.idx_mapping[:num_reqs].copy_(idx_mapping)

    patch_method("metadata-coherence", Speculator024, "_copy_request_inputs",
                 metadata_coherence.wrap_copy_request_inputs)
    args = (torch.tensor([4, 1], dtype=torch.int32), torch.ones(6), torch.ones(6, dtype=torch.int64))
    with pytest.raises(InvariantViolation) as info:
        Speculator024()._copy_request_inputs(2, *args)
    v = info.value.values
    assert info.value.invariant == "pad-tail" and v["row"] == 2 and v["idx_mapping[row]"] == 12
    assert v["field"] == "idx_mapping" and v["expected"] == -1
    # Without draft logits 0.25 fills nothing either, and nothing reads the padded rows then.
    Speculator024(draft_logits=False)._copy_request_inputs(2, *args)
