"""register(), the environment, laziness and discovery. Subprocesses where a clean interpreter
matters (what gets imported, what gets printed)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import sys
import textwrap

import pytest
from guards_helpers import requires_vllm
from invariant_check.runtime_guards.config import (
    GUARD_NAMES,
    ConfigError,
    parse_env,
)


def run_py(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("INVARIANT_CHECK_")}
    full.update(env)
    full.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    # cwd outside the checkout: `python -c` puts the cwd first on sys.path, and the source folder
    # is not the installed package (rules/ maps into invariant_check.rules only when installed).
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full, timeout=300, cwd=tempfile.gettempdir())


@pytest.mark.parametrize("raw, expected", [
    (None, set()), ("", set()), ("0", set()), ("1", set(GUARD_NAMES)), ("all", set(GUARD_NAMES)),
    ("topk-layout", {"topk-layout"}), (" group-metadata , topk-layout ", {"group-metadata", "topk-layout"}),
    ("metadata-coherence", {"metadata-coherence"}),
])
def test_guard_values(raw, expected):
    env = {} if raw is None else {"INVARIANT_CHECK_GUARDS": raw}
    assert set(parse_env(env).guards) == expected


@pytest.mark.parametrize("env, var", [
    ({"INVARIANT_CHECK_GUARDS": "yes-please"}, "INVARIANT_CHECK_GUARDS"),
    ({"INVARIANT_CHECK_GUARDS": "topk-layout,nope"}, "INVARIANT_CHECK_GUARDS"),
    ({"INVARIANT_CHECK_GUARDS": "1", "INVARIANT_CHECK_GUARDS_MODE": "loud"}, "INVARIANT_CHECK_GUARDS_MODE"),
    ({"INVARIANT_CHECK_GUARDS": "1", "INVARIANT_CHECK_TEST_FAULT": "everything"}, "INVARIANT_CHECK_TEST_FAULT"),
    ({"INVARIANT_CHECK_COMPACTION": "cuda"}, "INVARIANT_CHECK_COMPACTION"),
])
def test_invalid_values_name_the_variable_and_accepted_values(env, var):
    with pytest.raises(ConfigError) as info:
        parse_env(env)
    msg = str(info.value)
    assert var in msg and "accepted values" in msg and "\n" not in msg


def test_defaults():
    cfg = parse_env({"INVARIANT_CHECK_GUARDS": "1"})
    assert cfg.mode == "raise" and cfg.report_dir is None and cfg.compaction == "vllm" and not cfg.faults


PROBE = """
    import sys
    before = set(sys.modules)
    hooks_before = len(sys.meta_path)
    from invariant_check.runtime_guards import plugin
    plugin.register(); plugin.register()
    from invariant_check.runtime_guards.import_hook import GuardImportHook
    import json
    print(json.dumps({
        "hooks": sum(isinstance(f, GuardImportHook) for f in sys.meta_path),
        "heavy": sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('torch', 'vllm')),
        "installed": plugin._state["installed"],
    }))
"""


def test_register_off_installs_nothing():
    proc = run_py(PROBE)
    out = json.loads(proc.stdout)
    assert out == {"hooks": 0, "heavy": [], "installed": False}
    assert proc.stderr == ""


def test_register_invalid_prints_exactly_one_error_line_and_installs_nothing():
    proc = run_py(PROBE, INVARIANT_CHECK_GUARDS="topk")
    out = json.loads(proc.stdout)
    assert out["hooks"] == 0 and not out["installed"]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "INVARIANT_CHECK_GUARDS" in lines[0] and "topk-layout" in lines[0] and "group-metadata" in lines[0]


def test_register_on_is_lazy_and_idempotent():
    proc = run_py(PROBE, INVARIANT_CHECK_GUARDS="1")
    out = json.loads(proc.stdout)
    # One hook even after two calls, and neither torch nor vLLM imported by register().
    assert out == {"hooks": 1, "heavy": [], "installed": True}


@requires_vllm
@pytest.mark.vllm
def test_real_entry_point_patches_when_vllm_imports_the_module():
    code = """
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        import sys
        print("mtp-before", "vllm.model_executor.models.deepseek_mtp" in sys.modules)
        from vllm.model_executor.models.deepseek_mtp import DeepSeekMultiTokenPredictor as C
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer as P
        print("wrapped", all(getattr(C.__dict__[m], "__invariant_check_wrapped__", False)
                             for m in ("set_skip_topk", "compact_topk_indices", "forward")),
              getattr(P.__dict__["build_per_group_and_layer_attn_metadata"], "__invariant_check_wrapped__", False))
    """
    proc = run_py(code, INVARIANT_CHECK_GUARDS="1")
    assert "mtp-before False" in proc.stdout, proc.stderr[-2000:]
    assert "wrapped True True" in proc.stdout, proc.stderr[-2000:]
    off = run_py(code)
    assert "wrapped False False" in off.stdout, off.stderr[-2000:]


@requires_vllm
@pytest.mark.vllm
def test_a_future_model_class_is_discovered_by_the_import_hook(guards, tmp_path, monkeypatch):
    import vllm.models

    pkg = tmp_path / "zz_future_model"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mtp.py").write_text(textwrap.dedent("""
        class FuturePredictor:
            def set_skip_topk(self, skip):
                self.skip = skip
            def compact_topk_indices(self, slot_ids):
                self.compacted = slot_ids
            def forward(self, input_ids):
                return input_ids
        class Unrelated:
            def forward(self, x):
                return x
    """))
    monkeypatch.setattr(vllm.models, "__path__", [*vllm.models.__path__, str(tmp_path)])
    guards(mode="raise")
    for name in ("vllm.models.zz_future_model", "vllm.models.zz_future_model.mtp"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import importlib

    mod = importlib.import_module("vllm.models.zz_future_model.mtp")
    try:
        for meth in ("set_skip_topk", "compact_topk_indices", "forward"):
            assert getattr(mod.FuturePredictor.__dict__[meth], "__invariant_check_wrapped__", False), meth
        assert not getattr(mod.Unrelated.forward, "__invariant_check_wrapped__", False)
        assert mod.__loader__.__class__.__name__ != "_PatchingLoader"  # the real loader is back
    finally:
        sys.modules.pop("vllm.models.zz_future_model.mtp", None)
        sys.modules.pop("vllm.models.zz_future_model", None)


@requires_vllm
@pytest.mark.vllm
def test_every_installed_topk_class_is_discovered(guards):
    import importlib

    import vllm
    from invariant_check.runtime_guards.patcher import REGISTRY
    from invariant_check.runtime_guards.targets import TARGETS, candidate_modules, own_classes

    rows = [t for t in TARGETS if t.discovered and t.attr == "compact_topk_indices"]
    found = sorted({m for t in rows for m in candidate_modules(os.path.dirname(vllm.__file__), t)})
    assert {"vllm.model_executor.models.deepseek_mtp", "vllm.models.deepseek_v32.nvidia.mtp",
            "vllm.models.deepseek_v32.amd.mtp", "vllm.models.glm5next.common.mtp", "vllm.models.hy_v4.nvidia.mtp",
            "vllm.models.qwen4_exp.nvidia.mtp"} <= set(found)
    guards(mode="raise")
    imported = 0
    for module in found:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue  # e.g. needs torchvision, which the CPU setup removes
        imported += 1
        classes = [c for c in own_classes(mod) if "compact_topk_indices" in vars(c)]
        assert classes, module
        for cls in classes:
            target = f"{module}:{cls.__qualname__}.compact_topk_indices"
            assert REGISTRY.is_patched(target), target
    assert imported >= 4


@requires_vllm
@pytest.mark.vllm
def test_ray_executor_would_copy_our_variables_to_its_workers():
    code = """
        from invariant_check.runtime_guards import plugin
        plugin.register()
        from vllm.ray.ray_env import get_env_vars_to_copy
        copied = get_env_vars_to_copy()
        print("copied", sorted(v for v in copied if v.startswith("INVARIANT_CHECK_")))
    """
    proc = run_py(code, INVARIANT_CHECK_GUARDS="1", INVARIANT_CHECK_GUARDS_MODE="record",
                  VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY="MY_")
    assert "copied ['INVARIANT_CHECK_GUARDS', 'INVARIANT_CHECK_GUARDS_MODE']" in proc.stdout, proc.stderr[-2000:]
    off = run_py(code)
    assert "copied []" in off.stdout, off.stderr[-2000:]
