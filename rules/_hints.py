"""Fix hints, written as a vLLM developer would fix the code in vLLM itself (the reference
kernel of this project is mentioned as an option, never required)."""

from __future__ import annotations


def compaction_method_hint(compaction: str) -> str:
    return (
        f"Add a `{compaction}(self, slot_ids)` method that gathers each distinct shared top-k "
        "buffer once: for each module in `self.modules()` and the attention `impl` it keeps, "
        "take its `topk_indices_buffer`, skip a storage already gathered (`data_ptr()`), and "
        "set `buf[:slot_ids.numel()] = buf[slot_ids]` (`lint --fix --unsafe-fixes` writes it "
        "for an `nn.Module`). Or delegate to "
        "`invariant_check.compaction.compact_topk_indices_(self, slot_ids)`."
    )


def compaction_call_hint(receiver: str, compaction: str, indices: str) -> str:
    return (
        f"Call `{receiver}.{compaction}({indices})` after the step-0 forward and before the "
        f"next forward (e.g. right after this switch), on every path that switches reuse on; "
        f"the model's `{compaction}` gathers `buf[:n] = buf[{indices}]` once per distinct shared "
        f"buffer, with `n = {indices}.numel()`."
    )
