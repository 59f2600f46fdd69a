# SPDX-License-Identifier: Apache-2.0
"""End-to-end reproducer on a GPU: draft-model speculative decoding with an MLA draft.

    VLLM_USE_V2_MODEL_RUNNER=0 python repro_gpu.py [--target M] [--draft M]

Needs one GPU with about 80 GB (DeepSeek-V2-Lite-Chat, 16B MoE with MLA, loaded twice:
as the target and as the draft; any MLA checkpoint whose `model_type` is not
`deepseek_v3` works as the draft: vLLM turns a `deepseek_v3` draft into `method="mtp"`).

`VLLM_USE_V2_MODEL_RUNNER=0` selects the V1 model runner, whose proposer extends the
draft batch with `extend_all_queries_by_N` (vLLM 0.33.0 runs the V2 runner by default on
a GPU, which is not affected). The prompts have mixed lengths and are submitted
together, so that a draft batch holds a request with context next to fresh prompts.

Expected on vLLM 0.28-0.33 (which have `plan_mla_context_chunks`, PR #50613), stock: the
engine dies on a draft proposal with `AssertionError` at `assert seq_lens` in
`plan_mla_context_chunks` (EngineDeadError here; exit status 1). With the patch: every
prompt gets its tokens (compared with a run without speculative decoding), exit status
0. On 0.20-0.25 the run completes but the draft attends to N context tokens fewer on the
affected rows (lower acceptance, not wrong output: the target verifies).

NOT RUN: written and checked for syntax only; no GPU was available where it was written.
"""

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="deepseek-ai/DeepSeek-V2-Lite-Chat")
    parser.add_argument("--draft", default="deepseek-ai/DeepSeek-V2-Lite-Chat")
    parser.add_argument("--num-speculative-tokens", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") != "0":
        print("set VLLM_USE_V2_MODEL_RUNNER=0: the bug is in the V1 runner's proposer")
        return 2

    from vllm import LLM, SamplingParams

    words = "the quick brown fox jumps over the lazy dog and keeps running".split()
    # fresh prompts of mixed lengths next to each other in one batch
    prompts = [
        " ".join(words[i % len(words)] for i in range(n))
        for n in (5, 900, 20, 9, 300, 12)
    ]
    params = SamplingParams(
        temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True
    )
    common = dict(
        trust_remote_code=True,
        max_model_len=2048,
        max_num_seqs=4,
        max_num_batched_tokens=1024,
        gpu_memory_utilization=0.85,
    )
    llm = LLM(
        model=args.target,
        speculative_config={
            "method": "draft_model",
            "model": args.draft,
            "num_speculative_tokens": args.num_speculative_tokens,
        },
        **common,
    )
    try:
        outputs = llm.generate(prompts, params)
    except (
        Exception
    ) as exc:  # EngineDeadError: the worker's AssertionError is logged above
        print(f"FAIL: generation died: {type(exc).__name__}: {exc}")
        return 1
    got = [o.outputs[0].token_ids for o in outputs]
    del llm

    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()
    reference = [
        o.outputs[0].token_ids
        for o in LLM(model=args.target, **common).generate(prompts, params)
    ]
    same = sum(1 for a, b in zip(got, reference) if list(a) == list(b))
    # (informative: batch-dependent numerics can change a greedy token in bf16)
    print(
        f"OK: {len(got)} prompts served; {same} of {len(got)} equal to the "
        "run without speculation"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
