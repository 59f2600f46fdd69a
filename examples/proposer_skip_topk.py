"""IC002: step 0 writes the top-k buffer per token, then reuse is switched on without
compacting it to one row per request."""


class MTPProposer:
    def propose(self, model_kwargs, token_indices_to_sample):
        self.model.model.set_skip_topk(False)
        hidden_states = self.model(**model_kwargs)

        self.model.model.set_skip_topk(True)

        draft_token_ids = [self.sample(hidden_states[token_indices_to_sample])]
        for _ in range(self.num_speculative_tokens - 1):
            hidden_states = self.model(**model_kwargs)
            draft_token_ids.append(self.sample(hidden_states))
        return draft_token_ids
