"""IC004, as a vLLM plugin writes it: vLLM's metadata class comes from the installed vLLM (or,
in a venv without it, from the models bundled with invariant-check: `lint -v` says which). The
draft loop advances a shallow copy's `seq_lens` and CPU shadow, but not its `max_seq_len` or
`seq_lens_cpu_upper_bound`, which the copy keeps from the original."""

import copy

from vllm.v1.attention.backends.utils import CommonAttentionMetadata


class Proposer:
    def propose(self, common_attn_metadata: CommonAttentionMetadata, builder):
        cad = copy.copy(common_attn_metadata)
        for token_index in range(self.num_speculative_tokens - 1):
            cad.seq_lens[: self.batch_size] += 1
            if cad._seq_lens_cpu is not None:
                cad._seq_lens_cpu[: self.batch_size] += 1
            attn_metadata = builder.build_for_drafting(cad, token_index + 1)
            self.run_draft_step(attn_metadata)
