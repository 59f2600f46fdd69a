"""A v1 proposer's draft steps on CPU with vLLM 0.32's own code: the real
`SpecDecodeBaseProposer` (created without its __init__, given the buffers the steps read), real
`CommonAttentionMetadata`, and `_update_positions_dependent_metadata` advancing each step through
vLLM's CPU kernels. The metadata builders are stand-ins (the real ones need a GPU backend).

Shared by the metadata-coherence unit tests and the Ray-actor test, which runs it in an actor.
"""

from __future__ import annotations

import types

import torch

BLOCK = 16
# 3 requests; row r owns these KV blocks (block_table[r]).
TABLE = [[3, 7, 0, 0], [5, 9, 2, 0], [1, 4, 6, 8]]
SEQ = [20, 33, 50]  # context length of each request when the proposal starts (after step 0)


def slot_of(row, pos):
    return TABLE[row][pos // BLOCK] * BLOCK + pos % BLOCK


def register_cpu_kernels():
    """A vLLM CPU worker registers C++ versions of the spec-decode Triton kernels at start-up."""
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()


class _Builder:
    def build_for_drafting(self, common_attn_metadata, draft_index):
        return types.SimpleNamespace(draft_index=draft_index)


def make_proposer(max_model_len=256):
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.worker.utils import AttentionGroup

    p = SpecDecodeBaseProposer.__new__(SpecDecodeBaseProposer)
    p.draft_attn_groups = [AttentionGroup(backend=None, layer_names=["draft.attn"], kv_cache_spec=None,
                                          kv_cache_group_id=0, metadata_builders=[_Builder()])]
    p.allowed_attn_types = None
    p.num_speculative_tokens = 3
    p.uses_mrope = False
    p.positions = torch.zeros(64, dtype=torch.int64)
    p._slot_mapping_buffer = torch.zeros(64, dtype=torch.int64)
    p.max_model_len = max_model_len
    p.block_size = BLOCK
    return p


def step0_metadata(p, seq=SEQ, query_len=4):
    """The metadata of draft step 0 as the padded drafter hands it over: each request's last
    `query_len` tokens (the sampled one and the speculated ones), positions in the proposer's
    buffer, slots from the block table."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    positions, slots = [], []
    for r, s in enumerate(seq):
        for pos in range(s - query_len, s):
            positions.append(pos)
            slots.append(slot_of(r, pos))
    n_tok = len(positions)
    p.positions[:n_tok] = torch.tensor(positions)
    qsl = torch.arange(0, query_len * len(seq) + 1, query_len, dtype=torch.int32)
    seq_t = torch.tensor(seq, dtype=torch.int32)
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq_t.clone(), num_reqs=len(seq),
        num_actual_tokens=n_tok, max_query_len=query_len, max_seq_len=max(seq),
        block_table_tensor=torch.tensor(TABLE, dtype=torch.int32), slot_mapping=torch.tensor(slots),
        seq_lens_cpu_upper_bound=seq_t.clone())


def run_draft_steps(p, cad, steps=3, between=None):
    """Step 0, then the draft steps the way vLLM 0.32's proposer advances them: its own
    `_update_positions_dependent_metadata`, then the step's metadata build."""
    p.build_per_group_and_layer_attn_metadata(cad, draft_index=0)
    batch = cad.num_reqs
    last = cad.query_start_loc[1:].long() - 1
    positions = p.positions[last].clone()
    cad.num_actual_tokens, cad.max_query_len = batch, 1
    cad.query_start_loc = torch.arange(batch + 1, dtype=torch.int32)
    cad.query_start_loc_cpu = cad.query_start_loc.clone()
    for k in range(1, steps):
        positions = p._update_positions_dependent_metadata(positions, cad, batch, batch, BLOCK)
        if between is not None:
            between(k, cad)
        p.build_per_group_and_layer_attn_metadata(cad, draft_index=k)
    return cad
