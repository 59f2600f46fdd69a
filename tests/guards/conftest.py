"""Fixtures for the runtime-guard tests: in-process guard installation, the tiny local
DeepSeek-V3 MTP checkpoint, and the real DeepSeek V3.2 MTP module built on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

# The builders (guards_*.py) live next to the tests and import by name: tests/guards is on
# pytest's pythonpath (pyproject.toml).


@pytest.fixture
def guards():
    """Install the guards in this process with a given config; everything is restored after."""
    from invariant_check.runtime_guards import metadata_coherence, patcher, runtime, topk_layout
    from invariant_check.runtime_guards.config import GUARD_NAMES, GuardConfig

    def reset():
        patcher.uninstall()
        topk_layout.reset_states()
        metadata_coherence.reset()

    def install(mode="raise", names=GUARD_NAMES, report_dir=None, faults=(), compaction="vllm", sync="deferred"):
        cfg = GuardConfig(guards=frozenset(names), mode=mode, report_dir=str(report_dir) if report_dir else None,
                          faults=frozenset(faults), compaction=compaction, sync=sync)
        reset()
        patcher.install(cfg)
        return runtime.reporter()

    yield install
    reset()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from guards_tiny_model import build_tiny_deepseek_mtp

    return build_tiny_deepseek_mtp(tmp_path_factory.mktemp("tiny-deepseek-mtp"))


@pytest.fixture(scope="session")
def v32(tiny_model_dir, tmp_path_factory):
    """(vllm_config, real DeepseekV32MTP, its inner predictor); built once, ~6-20 s, ~600 MB."""
    from guards_v32_module import build_v32_mtp, write_v32_config

    cfg_dir = write_v32_config(tiny_model_dir, tmp_path_factory.mktemp("tiny-v32"))
    cfg, model, stack = build_v32_mtp(cfg_dir, "nvidia")
    yield cfg, model, model.model
    stack.close()


@pytest.fixture(scope="session")
def v3_mtp(tiny_model_dir):
    """(vllm_config, vLLM's real DeepSeekMTP, its inner predictor): MLA without sparse attention,
    so no top-k index buffer anywhere; built once."""
    from guards_v32_module import build_mtp

    cfg, model, stack = build_mtp(tiny_model_dir, "vllm.model_executor.models.deepseek_mtp", "DeepSeekMTP",
                                  num_speculative_tokens=1)
    yield cfg, model, model.model
    stack.close()


@pytest.fixture(scope="session")
def v32_amd(tiny_model_dir, tmp_path_factory):
    """The ROCm variant of the same module, built the same way."""
    from guards_v32_module import build_v32_mtp, write_v32_config

    cfg_dir = write_v32_config(tiny_model_dir, tmp_path_factory.mktemp("tiny-v32-amd"))
    cfg, model, stack = build_v32_mtp(cfg_dir, "amd")
    yield cfg, model, model.model
    stack.close()


@pytest.fixture(scope="session")
def v32_two_layers(tiny_model_dir, tmp_path_factory):
    """The nvidia module with two MTP layers (two buffers, one per layer)."""
    from guards_v32_module import build_v32_mtp, write_v32_config

    cfg_dir = write_v32_config(tiny_model_dir, tmp_path_factory.mktemp("tiny-v32-2l"), num_mtp_layers=2)
    # vLLM requires the speculative tokens to be a multiple of the MTP layers.
    cfg, model, stack = build_v32_mtp(cfg_dir, "nvidia", num_speculative_tokens=2)
    yield cfg, model, model.model
    stack.close()
