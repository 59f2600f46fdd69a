"""IC004: the draft loop advances `seq_lens` and the CPU shadow, but not `max_seq_len`."""

from dataclasses import dataclass

import torch


@dataclass
class CommonAttentionMetadata:
    seq_lens: torch.Tensor
    max_seq_len: int
    _seq_lens_cpu: torch.Tensor | None = None


class Proposer:
    def propose(self, common_attn_metadata: CommonAttentionMetadata, builder):
        for token_index in range(self.num_speculative_tokens - 1):
            common_attn_metadata.seq_lens += 1
            if common_attn_metadata._seq_lens_cpu is not None:
                common_attn_metadata._seq_lens_cpu += 1
            attn_metadata = builder.build_for_drafting(common_attn_metadata, token_index + 1)
            self.run_draft_step(attn_metadata)
