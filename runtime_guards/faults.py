"""Fault injection for this project's own tests: INVARIANT_CHECK_TEST_FAULT.

NOT for production. Each switch reproduces one real bug inside a real vLLM run so the tests can
show the guards catch it end to end (workers are separate processes, so the fault has to travel
the same way as the guards: through the plugin and the environment). Values, comma separated:

- drop-compaction: `compact_topk_indices` does nothing, as when vLLM 0.23/0.24 never called it.
- wrong-slot-ids: the caller passes each request the slot of its neighbour (a wrong
  `token_indices_to_sample`); caught by the input check.
- wrong-rows: the compaction itself gathers the wrong rows (a broken kernel); caught by the
  result check wherever a top-k buffer exists.
- double-compaction: the compaction gathers twice (a buffer shared by two layers compacted
  per layer); caught by the result check.
- bad-group-metadata: from draft step 1 on, an extra attention group with a disallowed
  metadata type is put in front of the real groups (so it is never the last group); vLLM
  discards the per-group list after step 0, so the run itself is unaffected. Where vLLM has no
  allow-list (CPU, CUDA), the type of the real metadata is taken as the only allowed type.
- stale-max-seq-len: the vLLM 0.13/0.14 bug (PR #32312): from draft step 1 on, the common
  metadata's `max_seq_len` is put back to its step-0 value before the step's metadata is built,
  as when the draft loop advanced `seq_lens` but not `max_seq_len` (v1 proposer).

The switches are parsed once, with the rest of the configuration (config.parse_env).
"""

from __future__ import annotations

from typing import Any

from . import runtime


def active() -> frozenset[str]:
    cfg = runtime.config()
    return cfg.faults if cfg is not None else frozenset()


def wrong_slot_ids(slot_ids: Any) -> Any:
    n = slot_ids.numel()
    if n > 1:
        return slot_ids.roll(1, 0)
    return slot_ids + 1


def wrong_rows_ids(slot_ids: Any) -> Any:
    n = slot_ids.numel()
    if n > 1:
        return slot_ids.roll(1, 0)
    return (slot_ids - 1).clamp(min=0)


class FaultInjectedMetadata:
    """A metadata type no speculative-decoding allow-list contains."""

    def __repr__(self) -> str:
        return "FaultInjectedMetadata()"


class FaultInjectedGroup:
    def __init__(self) -> None:
        self.layer_names: list[str] = []
        self.backend = None

    def __repr__(self) -> str:
        return "FaultInjectedGroup()"
