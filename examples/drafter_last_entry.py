"""IC001: the per-group metadata is built in a loop, but only the last group is validated."""


class Drafter:
    def propose(self, common_attn_metadata):
        per_layer_attn_metadata = {}
        for attn_group in self.draft_attn_groups:
            attn_metadata = attn_group.get_metadata_builder().build_for_drafting(
                common_attn_metadata=common_attn_metadata, draft_index=0
            )
            for layer_name in attn_group.layer_names:
                per_layer_attn_metadata[layer_name] = attn_metadata

        if self.allowed_attn_types is not None and not isinstance(
            attn_metadata, self.allowed_attn_types
        ):
            raise ValueError(f"Unsupported attention metadata type: {type(attn_metadata)}")
        return per_layer_attn_metadata
