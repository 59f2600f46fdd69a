"""Shared setup for the whole test tree.

Helper modules (`ic_support`, `mutations`, `compaction_cases`, `guards_*`) are imported by name:
their folders are on pytest's `pythonpath` (pyproject.toml), so no test edits `sys.path` and
every `--import-mode` works. This conftest sits in `tests/`, not at the repository root on
purpose: pytest puts a root conftest's folder first on `sys.path`, where the source folder
`invariant_check/` would shadow an installed (non-editable) package, whose `rules` and
`runtime_guards` subpackages live elsewhere in the source tree.

The fixtures here: a copy of the checkout without build output (for the tests that build and
install the project: wheels, fresh virtualenvs, pre-commit hooks), and the vLLM releases of the
corpus unpacked once per run (`vllm_release`), shared by every xdist worker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from ic_corpus import require_tarball, unpack

ROOT = Path(__file__).resolve().parents[1]


def project_files() -> list[str]:
    """Tracked files plus untracked ones that git does not ignore, relative to the root."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return [rel for rel in listed.split("\0") if rel and (ROOT / rel).is_file()]


@pytest.fixture(scope="session")
def copy_project() -> Callable[[Path], Path]:
    """`copy_project(dest)` copies the checkout's files (no build/, egg-info, venvs or caches,
    which could leak stale output into a wheel) and returns `dest`. Deleted-but-indexed files are
    left out, so a copy matches the work tree a developer is about to commit."""
    if shutil.which("git") is None:
        pytest.skip("git is needed to list the project's files")
    files = project_files()

    def copy(dest: Path) -> Path:
        for rel in files:
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, target)
        return dest

    return copy


def shared_tmp(tmp_path_factory) -> Path:
    """A folder of this run shared by every xdist worker (each worker's basetemp is a child of
    it); the basetemp itself without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def vllm_release(tmp_path_factory) -> Callable[[str], Path]:
    """`vllm_release("0.33.0")` is the release's unpacked `vllm-0.33.0` folder (its `vllm/`
    package inside), unpacked from the corpus once per run for every test and worker (a file
    lock keeps two workers from unpacking the same release). Read it, never write to it: copy
    what a test changes. Skips (locally) or fails (in CI) when the tarball is missing."""
    from filelock import FileLock

    root = shared_tmp(tmp_path_factory) / "vllm-releases"
    root.mkdir(exist_ok=True)

    def get(version: str) -> Path:
        path = require_tarball(version)
        done = root / f"vllm-{version}"
        with FileLock(str(root / f"vllm-{version}.lock")):
            if not done.is_dir():
                staging = root / f".unpacking-{version}"
                shutil.rmtree(staging, ignore_errors=True)
                unpack(path, staging)
                (staging / f"vllm-{version}").rename(done)
                shutil.rmtree(staging)
        return done

    return get


# -- running in parallel (pytest-xdist, `--dist loadgroup` in scripts/test) ---------------------

# Session fixtures that build real vLLM modules (hundreds of MB, seconds each): the tests that use
# them run on one worker, so each is built once per run rather than once per worker.
_ONE_WORKER_FIXTURES = {"v32", "v32_amd", "v32_two_layers", "v3_mtp"}


def pytest_collection_modifyitems(config, items):
    """Group the tests that share an expensive fixture onto one xdist worker: every test of a
    module that uses a module- or class-scoped fixture (an engine, a built wheel, a mutated
    tree) stays with its module, and the users of the vLLM module fixtures stay together. Other
    tests go wherever a worker is free. Without xdist the marks do nothing."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        names = set(info.names_closure)
        if names & _ONE_WORKER_FIXTURES:
            item.add_marker(pytest.mark.xdist_group("vllm-mtp-modules"))
            continue
        for defs in info.name2fixturedefs.values():
            if defs and defs[-1].scope in ("module", "class", "package"):
                item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
                break


@pytest.fixture(scope="session")
def release_tree(vllm_release) -> Callable[[str], Path]:
    """`release_tree("vllm-0.24.0")` is the folder holding that release's `vllm/` package
    (`vllm_release` under the tarball's own name)."""

    def tree(release: str) -> Path:
        return vllm_release(release.removeprefix("vllm-"))

    return tree
