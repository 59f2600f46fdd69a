"""The pre-commit hook, run by real `pre-commit` in throwaway git repositories.

`try-repo` clones the hook repository at a commit and pip-installs it into its own virtualenv,
so it exercises `.pre-commit-hooks.yaml`, the package build and the console script together, as
a user of the hook gets them. The `repo: local` configurations of docs/install.md (no URL needed)
are read from that page and run as written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from ic_corpus import require_tarball

pytest.importorskip("pre_commit")  # in the `test` extra, not in `lint-test`

ROOT = Path(__file__).resolve().parents[1]
INSTALL_DOC = ROOT / "docs" / "install.md"
WHEEL_PLACEHOLDER = "/absolute/path/to/invariant_check-0.1.0-py3-none-any.whl"

BROKEN = """\
import torch.nn as nn


class Predictor(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip
"""

FIXED = BROKEN + """
    def compact_topk_indices(self, slot_ids):
        self.buf[: slot_ids.numel()] = self.buf[slot_ids]
"""


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    # A developer's global git config (hooks, signing, templates) must not leak in.
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="test",
        GIT_AUTHOR_EMAIL="test@example.invalid",
        GIT_COMMITTER_NAME="test",
        GIT_COMMITTER_EMAIL="test@example.invalid",
    )
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    env.pop("GIT_INDEX_FILE", None)
    return env


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=_git_env(), check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture(scope="session")
def hook_repo(tmp_path_factory, copy_project) -> Path:
    """A git repository holding this project's files, the hook config committed.

    try-repo needs the hook at a commit; copying the project's tracked and untracked
    (not ignored) files keeps the developer's own repository, index and branches untouched.
    """
    if shutil.which("git") is None:
        pytest.fail("git is needed to test the pre-commit hook")
    repo = copy_project(tmp_path_factory.mktemp("hook-repo"))
    assert (repo / ".pre-commit-hooks.yaml").is_file()
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--no-verify", "-m", "hook under test")
    return repo


@pytest.fixture(scope="session")
def pre_commit_home(tmp_path_factory) -> Path:
    # One home for the session: the hook's virtualenv is built once and reused.
    return tmp_path_factory.mktemp("pre-commit-home")


def _try_repo(target: Path, hook_repo: Path, home: Path, *files: str):
    env = _git_env()
    env["PRE_COMMIT_HOME"] = str(home)
    env.pop("PRE_COMMIT", None)
    env.pop("SKIP", None)
    env["NO_COLOR"] = "1"
    # The linter's cache belongs to the target repository, not to the developer's.
    env.pop("INVARIANT_CHECK_CACHE_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo), "invariant-check",
         "--verbose", "--color", "never", "--files", *files],
        check=False,
        cwd=target,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_manifest_is_valid_and_declares_the_hook():
    res = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-manifest", str(ROOT / ".pre-commit-hooks.yaml")],
        check=False, capture_output=True, text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    import yaml  # a dependency of pre-commit

    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    hook = hooks["invariant-check"]
    assert hook["entry"] == "invariant-check lint"
    assert hook["language"] == "python"
    assert hook["types"] == ["python"]
    # Files are linted in parallel batches; the cache is written atomically.
    assert hook["require_serial"] is False


# Building the hook's virtualenv pip-installs the project: ~20 s here, more with a cold pip cache.
@pytest.mark.slow
def test_hook_fails_on_a_finding_and_passes_once_fixed(tmp_path, hook_repo, pre_commit_home):
    target = tmp_path / "target"
    target.mkdir()
    _git(target, "init", "-q")
    (target / "predictor.py").write_text(BROKEN)
    (target / "clean.py").write_text("x = 1\n")
    _git(target, "add", "predictor.py", "clean.py")

    failed = _try_repo(target, hook_repo, pre_commit_home, "predictor.py", "clean.py")
    out = failed.stdout + failed.stderr
    assert failed.returncode == 1, out
    assert "invariant-check" in out and "Failed" in out, out
    assert "predictor.py:4:7: IC003" in out, out
    assert "clean.py" not in out, out

    (target / "predictor.py").write_text(FIXED)
    _git(target, "add", "predictor.py")
    passed = _try_repo(target, hook_repo, pre_commit_home, "predictor.py", "clean.py")
    out = passed.stdout + passed.stderr
    assert passed.returncode == 0, out
    assert "Passed" in out and "IC003" not in out, out
    # The hook's cache lives in the target repository and must not show up as a new file.
    assert _git(target, "ls-files", "--others", "--exclude-standard").strip() == "", out


@pytest.mark.slow
def test_hook_skips_non_python_files(tmp_path, hook_repo, pre_commit_home):
    # `types: [python]`: a text file with the same content is not handed to the linter.
    target = tmp_path / "target"
    target.mkdir()
    _git(target, "init", "-q")
    (target / "notes.txt").write_text(BROKEN)
    _git(target, "add", "notes.txt")
    res = _try_repo(target, hook_repo, pre_commit_home, "notes.txt")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "no files to check" in out.lower() or "Skipped" in out, out


def _local_config(language: str) -> str:
    """The `repo: local` configuration of docs/install.md for that hook language."""
    blocks = re.findall(r"```yaml\n(.*?)```", INSTALL_DOC.read_text(), re.S)
    found = [b for b in blocks if "repo: local" in b and f"language: {language}" in b]
    assert len(found) == 1, f"docs/install.md should show one `repo: local` config with language: {language}"
    return found[0]


def _local_repo(root: Path, config: str) -> Path:
    target = root / "target"
    target.mkdir()
    _git(target, "init", "-q")
    (target / ".pre-commit-config.yaml").write_text(config)
    (target / "predictor.py").write_text(BROKEN)
    (target / "clean.py").write_text("x = 1\n")
    _git(target, "add", ".pre-commit-config.yaml", "predictor.py", "clean.py")
    return target


def _run_hooks(target: Path, home: Path, path: str | None = None) -> subprocess.CompletedProcess:
    env = _git_env()
    env.update(PRE_COMMIT_HOME=str(home), NO_COLOR="1")
    if path is not None:
        env["PATH"] = path
    for key in ("PRE_COMMIT", "SKIP", "INVARIANT_CHECK_CACHE_DIR"):
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--color", "never", "--verbose",
         "--files", "predictor.py", "clean.py"],
        check=False, cwd=target, env=env, capture_output=True, text=True, timeout=900,
    )


def _assert_fails_then_passes(target: Path, home: Path, path: str | None = None) -> None:
    failed = _run_hooks(target, home, path)
    out = failed.stdout + failed.stderr
    assert failed.returncode == 1, out
    assert "predictor.py:4:7: IC003" in out and "Failed" in out, out
    assert "clean.py:" not in out, out

    (target / "predictor.py").write_text(FIXED)
    _git(target, "add", "predictor.py")
    passed = _run_hooks(target, home, path)
    out = passed.stdout + passed.stderr
    assert passed.returncode == 0, out
    assert "Passed" in out and "IC003" not in out, out
    # The linter's cache is written in the target repository and must not show up as a new file.
    assert _git(target, "ls-files", "--others", "--exclude-standard").strip() == "", out


@pytest.mark.slow
def test_local_hook_runs_the_installed_tool_without_any_url(tmp_path):
    config = _local_config("system")
    assert "<" not in config, "the documented config must work as written, with no placeholder"
    target = _local_repo(tmp_path, config)
    home = tmp_path / "pre-commit-home"
    # The environment running pre-commit has invariant-check installed: this interpreter's.
    bindir = str(Path(sys.executable).parent)
    assert (Path(bindir) / "invariant-check").is_file()
    _assert_fails_then_passes(target, home, path=os.pathsep.join([bindir, os.environ.get("PATH", "")]))

    # Without the tool on PATH the hook cannot run: it really is the installed tool that ran.
    bare = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and not (Path(p) / "invariant-check").exists())
    missing = _run_hooks(target, home, path=bare)
    assert missing.returncode != 0 and "invariant-check" in missing.stdout + missing.stderr


@pytest.mark.slow
def test_local_hook_with_a_pinned_wheel_without_any_url(tmp_path, copy_project):
    config = _local_config("python")
    assert WHEEL_PLACEHOLDER in config
    # The wheel, built the way docs/install.md says.
    src = copy_project(tmp_path / "src")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", "dist", "."],
                           cwd=src, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr
    wheel = src / "dist" / Path(WHEEL_PLACEHOLDER).name
    assert [p.name for p in (src / "dist").iterdir()] == [wheel.name]

    target = _local_repo(tmp_path, config.replace(WHEEL_PLACEHOLDER, str(wheel)))
    # PATH without this environment's tool: the hook's own virtualenv must provide it.
    bare = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and not (Path(p) / "invariant-check").exists())
    _assert_fails_then_passes(target, tmp_path / "pre-commit-home", path=bare)


FINDING_LINE = re.compile(r"^(\S+\.py):(\d+):(\d+): (IC\d{3}) ", re.MULTILINE)


@pytest.mark.slow
def test_parallel_batches_find_what_a_whole_tree_run_finds(tmp_path, hook_repo, pre_commit_home):
    """`require_serial: false` lets pre-commit split the files into batches linted by separate
    processes, so a cross-file rule sees only its batch. On vLLM 0.24.0 (one IC002 and one
    IC003 site, and IC004's defended instance in `extend_all_queries_by_N`) the batched run
    must report exactly what one run over the whole tree reports: no finding lost, none added
    by facts missing from another batch."""
    target = tmp_path / "vllm-repo"
    target.mkdir()
    with tarfile.open(require_tarball("0.24.0")) as tf:
        kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tf.extractall(tmp_path / "unpacked", **kw)
    shutil.move(str(tmp_path / "unpacked" / "vllm-0.24.0" / "vllm"), str(target / "vllm"))
    _git(target, "init", "-q")
    _git(target, "add", "-A")

    env = _git_env()
    env.update(PRE_COMMIT_HOME=str(pre_commit_home), NO_COLOR="1")
    env.pop("INVARIANT_CHECK_CACHE_DIR", None)
    batched = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo), "invariant-check",
         "--verbose", "--color", "never", "--all-files"],
        check=False, cwd=target, env=env, capture_output=True, text=True, timeout=900,
    )
    out = batched.stdout + batched.stderr
    batches = re.findall(r"\((\d+) files? checked\)", out)
    assert len(batches) >= 2, f"pre-commit did not split the files into batches:\n{out[-3000:]}"

    whole = subprocess.run(
        [str(Path(sys.executable).parent / "invariant-check"), "lint", "--no-cache", "vllm"],
        check=False, cwd=target, env=env, capture_output=True, text=True, timeout=900,
    )
    expected = set(FINDING_LINE.findall(whole.stdout))
    assert {f[3] for f in expected} == {"IC002", "IC003", "IC004"}, whole.stdout + whole.stderr
    assert set(FINDING_LINE.findall(out)) == expected, out[-5000:]
    assert sum(map(int, batches)) == int(re.search(r"\((\d+) files checked\)", whole.stdout).group(1))
    assert batched.returncode == 1, out[-3000:]


@pytest.mark.slow
def test_local_hook_with_a_baseline_reports_only_new_findings_and_its_own_files_entries(tmp_path):
    """A tree with findings adopts the tool: the baseline is written once and named in
    pyproject.toml; the hook (the documented `repo: local` one) then fails only on a new finding,
    and on the unused entry of a file it was given, never on the entries of other files."""
    config = _local_config("system")
    target = tmp_path / "target"
    target.mkdir()
    _git(target, "init", "-q")
    (target / ".pre-commit-config.yaml").write_text(config)
    (target / "pyproject.toml").write_text('[tool.invariant-check]\nbaseline = "ic-baseline.json"\n')
    (target / "predictor.py").write_text(BROKEN)
    (target / "other.py").write_text(BROKEN.replace("Predictor", "Other"))
    bindir = str(Path(sys.executable).parent)
    env = _git_env()
    env.update(PRE_COMMIT_HOME=str(tmp_path / "home"), NO_COLOR="1",
               PATH=os.pathsep.join([bindir, os.environ.get("PATH", "")]))
    for key in ("PRE_COMMIT", "SKIP", "INVARIANT_CHECK_CACHE_DIR"):
        env.pop(key, None)
    written = subprocess.run([str(Path(bindir) / "invariant-check"), "lint", "--write-baseline", "ic-baseline.json", "."],
                             cwd=target, env=env, capture_output=True, text=True, timeout=300)
    assert written.returncode == 0, written.stderr
    _git(target, "add", "-A")

    def hook(*files: str) -> tuple[int, str]:
        res = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--color", "never", "--verbose", "--files", *files],
                             cwd=target, env=env, capture_output=True, text=True, timeout=900)
        return res.returncode, res.stdout + res.stderr

    code, out = hook("predictor.py", "other.py")
    assert code == 0 and "Passed" in out and "2 more in the baseline" in out, out

    # a new finding in predictor.py: reported alone
    (target / "predictor.py").write_text(BROKEN + "\n\nclass Newer(nn.Module):\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n")
    _git(target, "add", "predictor.py")
    code, out = hook("predictor.py")
    assert code == 1 and "predictor.py:9:7: IC003" in out and "predictor.py:4:7" not in out, out
    assert "IC902" not in out, out

    # other.py fixed: its entry is unused, reported when the hook is given other.py only
    (target / "predictor.py").write_text(BROKEN)
    (target / "other.py").write_text("x = 1\n")
    _git(target, "add", "-A")
    code, out = hook("predictor.py")
    assert code == 0 and "IC902" not in out, out
    code, out = hook("other.py")
    assert code == 1 and "ic-baseline.json:" in out and "IC902 Unused baseline entry: IC003 in `Other` of other.py" in out, out
    assert _git(target, "ls-files", "--others", "--exclude-standard").strip() == "", out
