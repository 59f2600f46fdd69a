"""IC006: the draft inputs advance once per attention group instead of once per draft step."""


class Speculator:
    def _advance_inputs(self, num_reqs):
        self.input_buffers.positions[:num_reqs] += 1
        self.input_buffers.seq_lens[:num_reqs] += 1

    def build_draft_metadata(self, common_attn_metadata, num_reqs, step):
        per_layer_attn_metadata = {}
        for group in self.draft_attn_groups:
            self._advance_inputs(num_reqs)
            attn_metadata = group.builder.build_for_drafting(common_attn_metadata, step)
            for name in group.layer_names:
                per_layer_attn_metadata[name] = attn_metadata
        return per_layer_attn_metadata
