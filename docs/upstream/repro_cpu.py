# SPDX-License-Identifier: Apache-2.0
"""extend_all_queries_by_N leaves the CPU upper bounds of seq_lens N below seq_lens.

Runs on a CPU, without a model or an engine:

    PYTHONPATH=<vLLM source> python repro_cpu.py

It builds the CommonAttentionMetadata of a draft batch as the V1 proposer hands it to
extend_all_queries_by_N (one request verifying its drafts with 5 tokens of context,
three fresh prompts), extends it by N = 1 with vLLM's own function, and feeds the
result to vLLM's own readers of the bound:

1. the documented invariant: seq_lens_cpu_upper_bound >= seq_lens on every row;
2. split_decodes_prefills_and_extends(), which finds prefills as bound == query_len;
3. the MLA prefill path's context lengths (bound - query_len, as
   MLACommonMetadataBuilder.build computes them) given to plan_mla_context_chunks(),
   where the source has it (vLLM PR #50613).

Exit status: 1 and what is wrong when a check fails (the released function), 0 when all
pass (the function with the fix), 2 when the vLLM source cannot be imported.
"""

import dataclasses
import sys

N = 1
QUERY_LENS = [4, 20, 9, 130]  # one decode-with-drafts row, then fresh prompts
CONTEXT_LENS = [5, 0, 0, 0]


def main() -> int:
    try:
        import torch

        from vllm.v1.attention.backends.utils import (
            CommonAttentionMetadata,
            split_decodes_prefills_and_extends,
        )
        from vllm.v1.spec_decode.utils import extend_all_queries_by_N
    except Exception as exc:  # noqa: BLE001 - any import failure means "no vLLM here"
        print(f"cannot import vLLM ({type(exc).__name__}: {exc}); set PYTHONPATH")
        return 2
    try:
        from vllm.model_executor.layers.attention.mla_attention import (
            plan_mla_context_chunks,
        )
    except ImportError:
        plan_mla_context_chunks = None
    import vllm

    print(f"vllm from {vllm.__file__}")

    fields = {f.name for f in dataclasses.fields(CommonAttentionMetadata)}
    if "seq_lens_cpu_upper_bound" not in fields:
        print("no seq_lens_cpu_upper_bound here (before vLLM 0.20): nothing to check")
        return 0

    q = torch.tensor(QUERY_LENS, dtype=torch.int32)
    seq_lens = torch.tensor(CONTEXT_LENS, dtype=torch.int32) + q
    qsl = torch.zeros(len(q) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(q, 0)
    num_tokens = int(qsl[-1])
    kwargs = dict(
        query_start_loc=qsl,
        query_start_loc_cpu=qsl.clone(),
        seq_lens=seq_lens,
        num_reqs=len(q),
        num_actual_tokens=num_tokens,
        max_query_len=int(q.max()),
        max_seq_len=int(seq_lens.max()),
        block_table_tensor=torch.zeros((len(q), 16), dtype=torch.int32),
        slot_mapping=torch.zeros(num_tokens, dtype=torch.int64),
        seq_lens_cpu_upper_bound=seq_lens.clone(),
    )
    cad = CommonAttentionMetadata(**{k: v for k, v in kwargs.items() if k in fields})
    new = extend_all_queries_by_N(
        cad,
        N=N,
        arange=torch.arange(cad.num_reqs + 1, dtype=torch.int32),
        new_slot_mapping=torch.zeros(num_tokens + cad.num_reqs * N, dtype=torch.int64),
    )
    new_q = (new.query_start_loc_cpu[1:] - new.query_start_loc_cpu[:-1]).tolist()
    bound = new.seq_lens_cpu_upper_bound.tolist()
    true_seq_lens = new.seq_lens.tolist()
    print(f"after extend_all_queries_by_N(N={N}): query_lens={new_q}")
    print(f"  seq_lens                 = {true_seq_lens}")
    print(f"  seq_lens_cpu_upper_bound = {bound}")

    problems = []
    low = [i for i, (b, s) in enumerate(zip(bound, true_seq_lens)) if b < s]
    if low:
        problems.append(
            f"seq_lens_cpu_upper_bound < seq_lens on rows {low}: it is documented "
            "as an upper bound of seq_lens, exact for prefill rows"
        )

    # split_decodes_prefills_and_extends: the rows without context are prefills
    split = split_decodes_prefills_and_extends(new, decode_threshold=1)
    want_prefills = sum(1 for c in CONTEXT_LENS if c == 0)
    print(f"  split_decodes_prefills_and_extends -> {split}")
    if split[2] != want_prefills:
        problems.append(
            f"split_decodes_prefills_and_extends finds {split[2]} prefill(s) and "
            f"{split[1]} extend(s); the batch has {want_prefills} fresh prompts and "
            "1 row with context"
        )

    # the MLA prefill path: context = bound - query_len
    contexts = [b - n for b, n in zip(bound, new_q)]
    print(f"  MLA prefill context lengths (bound - query_len) = {contexts}")
    print(f"  true context lengths                            = {CONTEXT_LENS}")
    if contexts != CONTEXT_LENS:
        problems.append(f"MLA prefill context lengths {contexts}, true {CONTEXT_LENS}")
    if plan_mla_context_chunks is not None:
        try:
            plan_mla_context_chunks(
                contexts,
                row_budget=1024,
                max_context_chunk=1024,
                split_alignment=1,
                padded_rows=lambda rows: rows,
            )
            print("  plan_mla_context_chunks: planned")
        except AssertionError as exc:
            problems.append(
                f"plan_mla_context_chunks({contexts}) fails: AssertionError {exc}"
                + " (the engine's worker dies here)"
            )
    else:
        print("  plan_mla_context_chunks: not in this source (before vLLM PR #50613)")

    if problems:
        print("FAIL:")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("OK: the bounds advanced with seq_lens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
