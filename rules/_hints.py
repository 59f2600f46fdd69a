"""Fix hints, written as a vLLM developer would fix the code in vLLM itself (the reference
kernel of this project is mentioned as an option, never required)."""

from __future__ import annotations


def compaction_method_hint(compaction: str) -> str:
    return (
        f"Add a `{compaction}` method that gathers each distinct shared buffer once: "
        f"`def {compaction}(self, slot_ids): n = slot_ids.numel(); seen = set(); "
        "for layer in self.layers: buf = layer.indexer.topk_indices_buffer; "
        "(seen.add(id(buf)), buf[:n].copy_(buf[slot_ids])) if id(buf) not in seen else None` "
        "(layers that share one buffer must not gather it twice). Optionally delegate to "
        "`invariant_check.compaction.compact_topk_indices_(self, slot_ids)`."
    )


def compaction_call_hint(receiver: str, compaction: str, indices: str) -> str:
    return (
        f"Call `{receiver}.{compaction}({indices})` after the step-0 forward and before the "
        f"next forward (e.g. right after this switch), on every path that switches reuse on; "
        f"the model's `{compaction}` gathers `buf[:n] = buf[{indices}]` once per distinct shared "
        f"buffer, with `n = {indices}.numel()`."
    )
