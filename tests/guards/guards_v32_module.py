"""Constructs the real DeepSeek V3.2 MTP predictor of the installed vLLM on CPU (and, from the
same code, vLLM's DeepSeek-V3 MTP, which has no sparse attention).

Two things are substituted because this machine has no GPU, and only for construction:
- the CPU platform refuses sparse attention, so the attention-backend lookup returns the
  FlashMLA-sparse backend *class* (its kernels are never called here);
- `torch.accelerator.empty_cache()` (called by the workspace manager when it grows) raises
  without an accelerator; on CPU there is no cache to empty, so it becomes a no-op.
Everything else (the predictor, its layers, indexer, MLA wrapper, the shared top-k buffer and its
holders, `set_skip_topk`, `compact_topk_indices`) is vLLM's own code.
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import ExitStack
from pathlib import Path
from unittest import mock


def write_v32_config(src: Path, out: Path, index_topk: int = 8, num_mtp_layers: int = 1) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(
        architectures=["DeepseekV32ForCausalLM"],
        model_type="deepseek_v32",
        index_topk=index_topk,
        index_n_heads=2,
        index_head_dim=128,
        q_lora_rank=32,  # the indexer needs a q LoRA
        num_nextn_predict_layers=num_mtp_layers,
    )
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            (out / f.name).write_bytes(f.read_bytes())
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_v32_mtp(model_dir: Path, variant: str = "nvidia", max_num_batched_tokens: int = 64,
                  num_speculative_tokens: int = 3):
    """Returns (vllm_config, top-level MTP model, exit stack keeping the patches alive)."""
    return build_mtp(model_dir, f"vllm.models.deepseek_v32.{variant}.mtp", "DeepseekV32MTP",
                     max_num_batched_tokens, num_speculative_tokens)


def build_mtp(model_dir: Path, module: str, cls: str, max_num_batched_tokens: int = 64,
              num_speculative_tokens: int = 3):
    """Any MTP model class of vLLM built on CPU from `model_dir` (the DeepSeek-V3 checkpoint
    gives vLLM's own `DeepSeekMTP`, with no sparse attention and so no top-k buffer)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import importlib

    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import (
        ensure_model_parallel_initialized,
        init_distributed_environment,
        parallel_state,
    )
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.worker import workspace

    ea = EngineArgs(
        model=str(model_dir), enforce_eager=True, max_model_len=256, max_num_seqs=4,
        max_num_batched_tokens=max_num_batched_tokens, load_format="dummy", dtype="bfloat16",
        speculative_config={"method": "mtp", "num_speculative_tokens": num_speculative_tokens},
    )
    cfg = ea.create_engine_config()
    stack = ExitStack()
    stack.enter_context(set_current_vllm_config(cfg))
    orig_get = type(current_platform).get_attn_backend_cls

    def get_attn_backend_cls(selected_backend, attn_selector_config, num_heads=None):
        if attn_selector_config.use_sparse:
            return AttentionBackendEnum.FLASHMLA_SPARSE.get_path()
        return orig_get(selected_backend, attn_selector_config, num_heads)

    stack.enter_context(mock.patch.object(current_platform, "get_attn_backend_cls", get_attn_backend_cls))
    stack.enter_context(mock.patch.object(torch.accelerator, "empty_cache", lambda: None))
    if not parallel_state.model_parallel_is_initialized():
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
        ensure_model_parallel_initialized(1, 1)
    if getattr(workspace, "_manager", None) is None:
        workspace.init_workspace_manager(torch.device("cpu"))
    mod = importlib.import_module(module)
    draft_cfg = cfg.speculative_config.draft_model_config
    with mock.patch.object(cfg, "model_config", draft_cfg):
        model = getattr(mod, cls)(vllm_config=cfg, prefix="model")
    return cfg, model, stack
