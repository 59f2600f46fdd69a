"""IC005: every draft step runs with the metadata built before the loop, while the inputs advance."""


def update_draft_inputs(draft_tokens, input_buffers):
    input_buffers.input_ids[: len(draft_tokens)] = draft_tokens
    input_buffers.positions += 1
    input_buffers.seq_lens += 1


class Speculator:
    def generate_draft(self, num_tokens, attn_metadata, slot_mappings):
        for step in range(1, self.num_speculative_steps):
            hidden = self.run_model(num_tokens, attn_metadata, slot_mappings)
            draft_tokens = self.sample(hidden)
            update_draft_inputs(draft_tokens, self.input_buffers)
