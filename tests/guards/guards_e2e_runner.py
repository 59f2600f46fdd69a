"""Runs one real vllm.LLM with speculative decoding on CPU; prints one JSON line.

MTP with 3 speculative tokens and three prompts unless IC_E2E_CONFIG (JSON) says otherwise:
`speculative_config`, `prompts`, `max_tokens`, and other `vllm.LLM` keyword arguments in `llm`.

Started as a subprocess by test_guard_e2e.py so that each run gets its own environment (the
guards and faults reach vLLM's engine and worker processes only through it) and its memory is
returned when it exits.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    model_dir = sys.argv[1]
    executor = sys.argv[2] if len(sys.argv) > 2 else None  # "ray", or vLLM's default
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from vllm import LLM, SamplingParams

    config = json.loads(os.environ.get("IC_E2E_CONFIG") or "{}")
    t0 = time.time()
    result = {"pid": os.getpid(), "ok": False, "error": None, "outputs": None}
    llm = None
    try:
        extra = {"distributed_executor_backend": executor} if executor else {}
        extra.update(config.get("llm", {}))
        llm = LLM(model=model_dir, enforce_eager=True, max_model_len=256, max_num_seqs=4,
                  max_num_batched_tokens=256, dtype="bfloat16", seed=0,
                  speculative_config=config.get("speculative_config", {"method": "mtp", "num_speculative_tokens": 3}),
                  **extra)
        prompts = config.get("prompts", ["w1 w2 w3 w4", "w5 w6 w7 w8 w9 w10", "w11 w12"])
        params = SamplingParams(max_tokens=config.get("max_tokens", 10), temperature=0, ignore_eos=True)
        outs = llm.generate(prompts, params)
        result["outputs"] = [list(o.outputs[0].token_ids) for o in outs]
        result["ok"] = True
    except Exception as exc:  # noqa: BLE001 - the test inspects what stopped the run
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        import traceback

        traceback.print_exc()
    result["seconds"] = round(time.time() - t0, 1)
    print("E2E-RESULT " + json.dumps(result), flush=True)
    # A normal shutdown stops the engine core and the workers; skipping it would leave them
    # orphaned (the test also kills the process group afterwards, for a dead engine).
    if llm is not None:
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001
            pass


if __name__ == "__main__":
    main()
