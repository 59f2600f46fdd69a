"""Builds a tiny DeepSeek-V3-style checkpoint with one MTP layer, entirely locally.

Random weights come from transformers' own DeepseekV3 implementation; the tokenizer is a
WordLevel vocabulary built with `tokenizers`. Nothing is fetched from a hub.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB_WORDS = 120
NUM_HIDDEN_LAYERS = 1  # target layers; the MTP layer is stored as layer index 1


def _config_kwargs(vocab_size: int) -> dict:
    return dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_attention_heads=2,
        num_key_value_heads=2,
        # The CPU MLA kernel only accepts these two sizes (measured, see notes).
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=32,
        v_head_dim=32,
        q_lora_rank=None,
        # Dense everywhere: the CPU backend has no use for MoE here and it keeps the model small.
        first_k_dense_replace=100,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        max_position_embeddings=512,
        rope_scaling=None,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )


def build_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for i in range(VOCAB_WORDS):
        vocab[f"w{i}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    fast.save_pretrained(out)
    return len(vocab)


def build_tiny_deepseek_mtp(out: Path, seed: int = 0, as_draft: bool = False) -> Path:
    """Write config.json, safetensors weights and tokenizer files into ``out``.

    ``as_draft``: a draft model for `method="draft_model"` (with another ``seed``): the same
    dense MLA layer without the MTP layer, declared DeepSeek-V2 (`DeepseekV2ForCausalLM`, same
    weights layout), because vLLM turns any `deepseek_v3` draft into `method="mtp"`."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = build_tokenizer(out)
    torch.manual_seed(seed)
    # One extra decoder layer: its weights become the MTP block (layer index NUM_HIDDEN_LAYERS).
    cfg = DeepseekV3Config(num_hidden_layers=NUM_HIDDEN_LAYERS + int(not as_draft), **_config_kwargs(vocab_size))
    model = DeepseekV3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)

    config = json.loads((out / "config.json").read_text())
    config.update(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3")
    config.pop("dtype", None)
    config["torch_dtype"] = "bfloat16"
    if as_draft:
        config.update(architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2")
        (out / "config.json").write_text(json.dumps(config, indent=2))
        return out

    weights_file = out / "model.safetensors"
    state = load_file(str(weights_file))
    hidden = cfg.hidden_size
    p = f"model.layers.{NUM_HIDDEN_LAYERS}."
    gen = torch.Generator().manual_seed(seed + 1)

    def rand(*shape):
        return (torch.randn(*shape, generator=gen) * 0.02).to(torch.bfloat16)

    # The MTP-only tensors transformers does not model.
    state[p + "enorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    state[p + "hnorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    state[p + "eh_proj.weight"] = rand(hidden, 2 * hidden)
    state[p + "shared_head.norm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    state[p + "shared_head.head.weight"] = rand(vocab_size, hidden)
    state[p + "embed_tokens.weight"] = state["model.embed_tokens.weight"].clone()
    save_file({k: v.contiguous() for k, v in state.items()}, str(weights_file), metadata={"format": "pt"})

    config.update(
        num_hidden_layers=NUM_HIDDEN_LAYERS,
        num_nextn_predict_layers=1,
        # Makes the v1 proposer toggle set_skip_topk / call compact_topk_indices each step.
        index_share_for_mtp_iteration=True,
    )
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def build_tiny_llama(out: Path, num_layers: int = 2, seed: int = 0) -> Path:
    """A tiny Llama checkpoint (random weights) with the same local tokenizer: a target or,
    with fewer layers and another seed, a draft model for `method="draft_model"`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = build_tokenizer(out)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=num_layers,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    config = json.loads((out / "config.json").read_text())
    config.pop("dtype", None)
    config["torch_dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


if __name__ == "__main__":
    import sys

    print(build_tiny_deepseek_mtp(Path(sys.argv[1])))
