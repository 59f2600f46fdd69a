"""Shared setup for the whole test tree.

Helper modules (`ic_support`, `mutations`, `compaction_cases`, `guards_*`) are imported by name:
their folders are on pytest's `pythonpath` (pyproject.toml), so no test edits `sys.path` and
every `--import-mode` works. This conftest sits in `tests/`, not at the repository root on
purpose: pytest puts a root conftest's folder first on `sys.path`, where the source folder
`invariant_check/` would shadow an installed (non-editable) package, whose `rules` and
`runtime_guards` subpackages live elsewhere in the source tree.

The fixture here serves the tests that build and install the project (wheels, fresh
virtualenvs, pre-commit hooks): a copy of the checkout without build output.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

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


def _corpus() -> Path:
    from ic_support import corpus_dir  # tests/fixtures, on pytest's pythonpath

    return corpus_dir()


@pytest.fixture(scope="session")
def release_tree(tmp_path_factory) -> Callable[[str], Path]:
    """`release_tree("vllm-0.24.0")` is the folder holding that release's `vllm/` package,
    unpacked once per session from `../shared/corpus/vllm-0.24.0.tar.xz` (beside the checkout
    or a folder above it; CI has it). A test that calls it skips, saying so, where the tarball is absent."""
    import tarfile

    base = tmp_path_factory.mktemp("corpus")
    unpacked: dict[str, Path] = {}

    def tree(release: str) -> Path:
        if release not in unpacked:
            tarball = _corpus() / f"{release}.tar.xz"
            if not tarball.is_file():
                pytest.skip(f"needs the vLLM release corpus: {tarball} is absent")
            with tarfile.open(tarball) as tar:
                # the "data" filter where this Python has it (3.10.12+): no links out, no devices
                tar.extractall(base, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            unpacked[release] = base / release
        return unpacked[release]

    return tree

