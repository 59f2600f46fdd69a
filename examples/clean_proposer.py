"""The fixed shapes of all three: nothing to report here."""

import torch
import torch.nn as nn

from invariant_check.compaction import compact_topk_indices_


class MultiTokenPredictor(nn.Module):
    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.indexer.skip_topk = skip

    def compact_topk_indices(self, slot_ids: torch.Tensor) -> None:
        compact_topk_indices_(self, slot_ids)


class Proposer:
    def propose(self, model_kwargs, token_indices_to_sample, per_group_attn_metadata):
        for attn_metadata in per_group_attn_metadata.values():
            if not isinstance(attn_metadata, self.allowed_attn_types):
                raise ValueError(f"Unsupported attention metadata type: {type(attn_metadata)}")

        self.model.model.set_skip_topk(False)
        hidden_states = self.model(**model_kwargs)
        self.model.model.set_skip_topk(True)
        self.model.model.compact_topk_indices(token_indices_to_sample)

        draft_token_ids = [self.sample(hidden_states[token_indices_to_sample])]
        for _ in range(self.num_speculative_tokens - 1):
            hidden_states = self.model(**model_kwargs)
            draft_token_ids.append(self.sample(hidden_states))
        return draft_token_ids
