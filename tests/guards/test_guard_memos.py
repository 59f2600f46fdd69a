"""Guard `metadata-coherence`: memo caches and DCP local lengths, on vLLM 0.32's own objects.

The draft steps are vLLM's (`run_draft_steps`: the real proposer's metadata build and its
`_update_positions_dependent_metadata` through vLLM's CPU kernels, after the layout rewrite of
its draft loop). The draft's metadata builder is a stand-in that reads the common metadata the
way the sparse-MLA builders do (`token_to_req_indices(self.req_id_per_token_buffer)`) and the
Mamba/GDN ones (`compute_num_computed_tokens()`); `token_to_req_indices` runs vLLM's own Triton
kernel through Triton's interpreter (the CPU build has no Triton).
"""

from __future__ import annotations

import dataclasses
import json
import types

import pytest
from guards_helpers import requires_vllm

pytestmark = [requires_vllm, pytest.mark.vllm]

torch = pytest.importorskip("torch")

from guards_draft_steps import (
    SEQ,
    make_proposer,
    register_cpu_kernels,
    run_draft_steps,
    step0_metadata,
)

TOKEN_MEMO, COMPUTED_MEMO = "_token_to_req_indices_cache", "_num_computed_tokens_cache"


@pytest.fixture(scope="module", autouse=True)
def cpu_kernels():
    register_cpu_kernels()


@pytest.fixture
def triton_kernel(monkeypatch):
    """vLLM's compute_token_to_req_indices with its Triton kernel interpreted."""
    from guards_vllm_triton import interpreted, interpreted_call
    from vllm.v1.attention.ops import metadata

    copy = interpreted("vllm.v1.attention.ops.metadata")
    monkeypatch.setattr(metadata, "compute_token_to_req_indices", interpreted_call(copy.compute_token_to_req_indices))


class SparseBuilder:
    """Reads the common metadata as a sparse-MLA (and a Mamba) builder does; keeps what it saw."""

    def __init__(self):
        self.req_id_per_token_buffer = torch.zeros(64, dtype=torch.int32)
        self.seen: list[tuple[list[int], list[int]]] = []

    def build_for_drafting(self, common_attn_metadata, draft_index):
        cm = common_attn_metadata
        self.seen.append((cm.token_to_req_indices(self.req_id_per_token_buffer).tolist(),
                          cm.compute_num_computed_tokens().tolist()))
        return types.SimpleNamespace(draft_index=draft_index)


class DcpBuilder:
    """Records the DCP facts as vLLM's flash-attn/FlashInfer builders do (`dcp_world_size`,
    `dcp_rank` from get_dcp_world_size_and_rank, the interleave from the parallel config)."""

    def __init__(self, size, rank, interleave=1):
        self.dcp_world_size, self.dcp_rank, self.cp_kv_cache_interleave_size = size, rank, interleave

    def build_for_drafting(self, common_attn_metadata, draft_index):
        return types.SimpleNamespace(draft_index=draft_index)


def proposer_with(builder):
    p = make_proposer()
    p.draft_attn_groups[0].metadata_builders[0] = builder
    return p


def records(tmp_path):
    return [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]


def violations(tmp_path, invariant):
    return [r for r in records(tmp_path) if r["kind"] == "violation" and r["invariant"] == invariant]


# ---------------------------------------------------------------------------- learned from the class


def test_the_memos_are_learned_from_vllms_class():
    from invariant_check.runtime_guards import memos
    from vllm.v1.attention.backend import CommonAttentionMetadata

    found = {m.method: m for m in memos.memos_of(CommonAttentionMetadata)}
    assert found["token_to_req_indices"].field == TOKEN_MEMO and found["token_to_req_indices"].buffers == 1
    assert found["compute_num_computed_tokens"].field == COMPUTED_MEMO
    assert set(found["compute_num_computed_tokens"].reads) == {"seq_lens", "query_start_loc"}
    assert set(found) == {"token_to_req_indices", "compute_num_computed_tokens"}  # not replace(), unpadded()
    assert memos.memos_of(CommonAttentionMetadata) is memos.memos_of(CommonAttentionMetadata)  # cached


def test_a_memo_a_new_release_adds_is_learned_without_configuration():
    from invariant_check.runtime_guards import memos
    from vllm.v1.attention.backend import CommonAttentionMetadata

    @dataclasses.dataclass
    class Next(CommonAttentionMetadata):
        _max_query_cache: torch.Tensor | None = None

        def max_query(self) -> torch.Tensor:
            if self._max_query_cache is None:
                self._max_query_cache = (self.query_start_loc[1:] - self.query_start_loc[:-1]).max()
            return self._max_query_cache

    assert "_max_query_cache" in {m.field for m in memos.memos_of(Next)}
    no_source = type("Compiled", (), {})  # no file to read: nothing learned, nothing raised
    assert memos.memos_of(no_source) == ()


# ---------------------------------------------------------------------------- the V1 draft loop


def test_the_stock_draft_loop_keeps_the_memos_of_step_0_and_is_reported(guards, tmp_path, triton_kernel):
    rep = guards(mode="record", report_dir=tmp_path)
    builder = SparseBuilder()
    p = proposer_with(builder)
    run_draft_steps(p, step0_metadata(p))
    # what the builder was handed: every draft token of step 1 mapped to request 0 (the bug)
    assert builder.seen[0][0] == [0] * 4 + [1] * 4 + [2] * 4
    assert builder.seen[1][0] == [0, 0, 0]
    assert builder.seen[1][1] == [s - 4 for s in SEQ]  # step 0's computed tokens, not [s for s in SEQ]
    tok = [r for r in violations(tmp_path, "memo-cache") if r["values"]["field"] == TOKEN_MEMO]
    comp = [r for r in violations(tmp_path, "memo-cache") if r["values"]["field"] == COMPUTED_MEMO]
    assert tok and comp and rep.guard_errors == 0
    v = tok[0]["values"]
    assert v["draft_step"] == 1 and v["row"] == 1 and v["method"] == "token_to_req_indices"
    assert v[f"{TOKEN_MEMO}[row]"] == 0 and v["recomputed[row]"] == 1 and v["bad_rows"] == 2
    assert TOKEN_MEMO in tok[0]["message"] and "draft step 1" in tok[0]["message"]
    c = comp[0]["values"]
    # seq_lens advanced by 1 (the kernel) and query length 1: computed = seq_lens_at_step_1 - 1
    assert c["draft_step"] == 1 and c["row"] == 0 and c[f"{COMPUTED_MEMO}[row]"] == SEQ[0] - 4
    assert c["recomputed[row]"] == SEQ[0]
    assert {r["values"]["draft_step"] for r in tok} == {1, 2}


def test_the_violation_is_raised_at_draft_step_1_and_points_to_ic004(guards, triton_kernel):
    from invariant_check.runtime_guards.errors import InvariantViolation
    from invariant_check.runtime_guards.reporting import see_also

    guards(mode="raise")
    p = proposer_with(SparseBuilder())
    with pytest.raises(InvariantViolation) as info:
        run_draft_steps(p, step0_metadata(p))
    assert info.value.invariant == "memo-cache" and info.value.values["draft_step"] == 1
    assert any("IC004" in s for s in see_also("metadata-coherence", "memo-cache"))


def test_a_loop_that_invalidates_the_memos_is_clean(guards, triton_kernel):
    rep = guards(mode="raise")
    builder = SparseBuilder()
    p = proposer_with(builder)

    def invalidate(k, cad):  # after the layout changed, as vLLM's fix does
        cad._token_to_req_indices_cache = None
        cad._num_computed_tokens_cache = None

    run_draft_steps(p, step0_metadata(p), between=invalidate)
    assert builder.seen[1] == ([0, 1, 2], [s + 1 - 1 for s in SEQ])
    assert rep.violations == 0 and rep.guard_errors == 0


def test_deferred_memo_results_are_read_back_at_the_next_proposal(guards, tmp_path, monkeypatch, triton_kernel):
    from invariant_check.runtime_guards import deferred

    rep = guards(mode="record", report_dir=tmp_path)
    monkeypatch.setattr(deferred, "immediate", lambda t: False)
    p = proposer_with(SparseBuilder())
    cad = run_draft_steps(p, step0_metadata(p))
    cad._token_to_req_indices_cache.fill_(7)  # vLLM reuses the buffer: the report kept its own copy
    assert rep.violations == 0
    with pytest.raises(TypeError):  # the bare call reaches vLLM's propose() after the read-back
        p.propose()
    tok = [r for r in violations(tmp_path, "memo-cache") if r["values"]["field"] == TOKEN_MEMO]
    assert tok and tok[0]["values"][f"{TOKEN_MEMO}[row]"] == 0 and tok[0]["values"]["recomputed[row]"] == 1


def test_a_memo_whose_method_cannot_run_here_is_skipped_quietly(guards):
    """Without the interpreted kernel, vLLM's CPU build cannot recompute token_to_req_indices."""
    rep = guards(mode="raise")
    p = make_proposer()
    cad = step0_metadata(p)
    p.build_per_group_and_layer_attn_metadata(cad, draft_index=0)
    cad._token_to_req_indices_cache = torch.zeros(12, dtype=torch.int32)  # stale, not checkable here
    cad.num_actual_tokens, cad.max_query_len = 3, 1
    cad.query_start_loc = cad.query_start_loc_cpu = torch.arange(4, dtype=torch.int32)
    cad.slot_mapping = torch.full((3,), -1)
    p.build_per_group_and_layer_attn_metadata(cad, draft_index=1)
    p.build_per_group_and_layer_attn_metadata(cad, draft_index=2)  # not tried again
    assert rep.violations == 0 and rep.guard_errors == 0


def test_a_memo_shorter_than_the_layout_is_reported(guards, tmp_path, triton_kernel):
    """The extension case: the memo of 12 tokens, the batch now has 15."""
    guards(mode="record", report_dir=tmp_path)
    p = make_proposer()
    cad = step0_metadata(p)
    cad._token_to_req_indices_cache = torch.tensor([0] * 4 + [1] * 4 + [2] * 4, dtype=torch.int32)
    cad.query_start_loc = cad.query_start_loc_cpu = torch.tensor([0, 5, 10, 15], dtype=torch.int32)
    cad.num_actual_tokens, cad.max_query_len = 15, 5
    cad.slot_mapping = torch.full((15,), -1)
    p.build_per_group_and_layer_attn_metadata(cad, draft_index=0)
    (r,) = violations(tmp_path, "memo-cache")
    assert r["values"]["memo_shape"] == [12] and r["values"]["recomputed_shape"] == [15]


# ---------------------------------------------------------------------------- DCP local lengths


def dcp_lengths(seq, rank, size=2, interleave=1):
    from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens

    return get_dcp_local_seq_lens(seq, size, rank, interleave)


@pytest.mark.parametrize("rank", [0, 1])
def test_stale_dcp_local_lengths_are_reported_and_fresh_ones_are_clean(guards, tmp_path, rank):
    guards(mode="record", report_dir=tmp_path)
    p = proposer_with(DcpBuilder(2, rank))
    cad = step0_metadata(p)
    cad.dcp_local_seq_lens = dcp_lengths(cad.seq_lens, rank)
    run_draft_steps(p, cad)  # the stock step: seq_lens advance, the local lengths do not
    found = violations(tmp_path, "dcp-local-seq-lens")
    assert found and {r["values"]["draft_step"] for r in found} <= {1, 2}
    v = found[0]["values"]
    # with interleave 1 the token at position s lands on rank s % 2: those rows are one short
    steps = v["draft_step"]
    stale_rows = [i for i, s in enumerate(SEQ) if any((s + j - 1) % 2 == rank for j in range(1, steps + 1))]
    assert v["row"] == stale_rows[0] and v["dcp_rank"] == rank and v["dcp_size"] == 2
    assert v["expected[row]"] == v["dcp_local_seq_lens[row]"] + 1
    assert "dcp_local_seq_lens" in found[0]["message"]

    for f in tmp_path.glob("*.jsonl"):
        f.unlink()
    cad = step0_metadata(p)
    cad.dcp_local_seq_lens = dcp_lengths(cad.seq_lens, rank)

    def recompute(k, cad):  # what model runner v2 does for every draft build
        cad.dcp_local_seq_lens = dcp_lengths(cad.seq_lens, rank)

    run_draft_steps(p, cad, between=recompute)
    assert violations(tmp_path, "dcp-local-seq-lens") == []


def test_dcp_facts_from_vllms_parallel_state_and_config(guards, monkeypatch):
    """A builder that records no rank (vLLM's MLA builders): the rank from vLLM's DCP group, the
    interleave from the proposer's ParallelConfig, as vLLM's own code reads them."""
    from invariant_check.runtime_guards.errors import InvariantViolation
    from vllm.config import ParallelConfig
    from vllm.distributed import parallel_state

    guards(mode="raise")
    monkeypatch.setattr(parallel_state, "_DCP", types.SimpleNamespace(world_size=2, rank_in_group=1))
    p = make_proposer()
    p.draft_attn_groups[0].metadata_builders[0].dcp_world_size = 2
    p.vllm_config = types.SimpleNamespace(parallel_config=ParallelConfig(
        decode_context_parallel_size=2, tensor_parallel_size=2, cp_kv_cache_interleave_size=1))
    cad = step0_metadata(p)
    cad.dcp_local_seq_lens = dcp_lengths(cad.seq_lens, 1)
    with pytest.raises(InvariantViolation) as info:
        run_draft_steps(p, cad)
    assert info.value.invariant == "dcp-local-seq-lens" and info.value.values["dcp_rank"] == 1


def test_dcp_is_skipped_at_size_1_or_unknown_and_optimistic_lengths_are_accepted(guards):
    rep = guards(mode="raise")
    # size 1 (a replicated draft cache) and unknown (no builder facts, no group): stale, unchecked
    for builder in (DcpBuilder(1, 0), None):
        p = make_proposer() if builder is None else proposer_with(builder)
        cad = step0_metadata(p)
        cad.dcp_local_seq_lens = dcp_lengths(cad.seq_lens, 0)
        run_draft_steps(p, cad)
    # async scheduling: vLLM's runner computes the local lengths from the optimistic CPU lengths
    p = proposer_with(DcpBuilder(2, 0))
    cad = step0_metadata(p)
    cad.seq_lens -= torch.tensor([1, 2, 1], dtype=torch.int32)  # rejected tokens, known on the device only
    cad.dcp_local_seq_lens = dcp_lengths(cad.seq_lens_cpu_upper_bound, 0)
    p.build_per_group_and_layer_attn_metadata(cad, draft_index=0)
    assert rep.violations == 0 and rep.guard_errors == 0
