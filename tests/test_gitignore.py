""".gitignore respected by default (invariant_check/settings/gitignore.py), checked against real git."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ic_support import BAD_CLASS, RULE, assert_no_traceback, run_cli

from invariant_check.settings import gitignore
from invariant_check.settings.config import load_config
from invariant_check.lint.discovery import discover
from invariant_check.lint.projects import Project

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

# Every kind of line git knows: nested files, negation, anchored and directory patterns, `**`,
# escapes, trailing spaces, comments, a re-include inside an ignored folder (which git refuses).
IGNORES = {
    ".gitignore": """
# a comment
*.gen.py
/top_only.py
build/
!keep.gen.py
docs/**/draft_*.py
\\#hash.py
trailing.py   
spaced\\ .py
logs
!logs/important.py
""",
    "pkg/.gitignore": """
local.py
/anchored.py
sub/*.py
!sub/wanted.py
*.gen.py
!pkg_keep.gen.py
""",
    "pkg/deep/.gitignore": """
!local.py
""",
}
FILES = [
    "a.py", "x.gen.py", "keep.gen.py", "top_only.py", "pkg/top_only.py", "build/b.py", "pkg/build/c.py",
    "docs/draft_0.py", "docs/v1/draft_1.py", "docs/v1/v2/draft_2.py", "docs/final.py", "#hash.py", "hash.py",
    "trailing.py", "spaced .py", "logs/important.py", "logs/other.py", "pkg/local.py", "pkg/deep/local.py",
    "pkg/anchored.py", "pkg/deep/anchored.py", "pkg/sub/one.py", "pkg/sub/wanted.py", "pkg/sub/deeper/two.py",
    "pkg/y.gen.py", "pkg/pkg_keep.gen.py", "pkg/keep.gen.py", "info_excluded.py",
]


def _make_tree(root: Path) -> Path:
    for rel, text in IGNORES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text.lstrip("\n"))
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n")
    return root


def _git(root: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=str(root), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def _ours(root: Path, start: Path | None = None) -> list[str]:
    project = Project.of(load_config(None, fallback_root=root))
    found = discover([str(start or root)], scope_for=lambda folder: project, cwd=root)
    return sorted(p.relative_to(root).as_posix() for p, _ in found.files)


@needs_git
def test_the_walk_agrees_with_git(tmp_path):
    root = _make_tree(tmp_path / "repo")
    _git(root, "init", "-q")
    (root / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (root / ".git" / "info" / "exclude").write_text("info_excluded.py\n")
    listed = _git(root, "ls-files", "--others", "--exclude-standard", "-z").split("\0")
    by_git = sorted(p for p in listed if p.endswith(".py"))
    assert _ours(root) == by_git
    # sanity: the tree exercises both sides of most lines
    assert "keep.gen.py" in by_git and "x.gen.py" not in by_git
    assert "pkg/deep/local.py" in by_git and "pkg/local.py" not in by_git
    assert "pkg/sub/wanted.py" in by_git and "pkg/sub/one.py" not in by_git
    assert "logs/important.py" not in by_git  # no re-include inside an ignored folder
    # starting the walk below the top reads the .gitignore files above it too
    assert _ours(root, root / "pkg") == [p for p in by_git if p.startswith("pkg/")]


def test_outside_a_git_work_tree_nothing_is_ignored(tmp_path):
    root = _make_tree(tmp_path / "plain")
    assert _ours(root) == sorted(f for f in FILES if "build/" not in f)  # build/: a default exclude
    assert not gitignore.chain_for(root).files


def test_a_nested_repository_does_not_inherit_the_outer_rules(tmp_path):
    root = tmp_path / "outer"
    (root / ".git").mkdir(parents=True)
    (root / ".gitignore").write_text("*.py\n!inner/\n")
    (root / "inner" / ".git").mkdir(parents=True)
    (root / "inner" / "m.py").write_text("x = 1\n")
    (root / "o.py").write_text("x = 1\n")
    assert _ours(root) == ["inner/m.py"]


@needs_git
@pytest.mark.parametrize("walked", [["pkg"], ["pkg/sub", "pkg"], ["pkg", "pkg/deep"], ["docs/v1", "logs", "a.py"], ["."]])
def test_the_project_listing_reuses_walked_folders_and_equals_a_fresh_walk(tmp_path, walked):
    # The project's listing (who calls a function) reuses the folders the command line
    # walked: it must list the same files, in the same order, as walking the root afresh.
    root = _make_tree(tmp_path / "repo")
    _git(root, "init", "-q")
    project = Project.of(load_config(None, fallback_root=root))
    scope = lambda folder: project  # noqa: E731
    first = discover(walked, scope_for=scope, cwd=root)
    fresh = discover([str(root)], scope_for=scope, cwd=root)
    reused = discover([str(root)], scope_for=scope, cwd=root, known=first)
    assert [p for p, _ in reused.files] == [p for p, _ in fresh.files]
    assert len(fresh.files) > 10


def test_parse_lines():
    parsed = gitignore.parse("# c\n\n!a\n\\!b\n\\#c\nd/ \ne\\ \n/\n", "/base")
    got = [(r.glob.pattern, r.negated, r.glob.dir_only) for r in parsed.rules]
    assert got == [("a", True, False), ("!b", False, False), ("#c", False, False), ("d/", False, True), ("e ", False, False)]


# -- through the command ----------------------------------------------------------------------------


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)  # a work tree's top, as git marks it
    (root / ".gitignore").write_text("generated/\n*_tmp.py\n")
    for rel in ("src/bad.py", "generated/bad.py", "src/bad_tmp.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(BAD_CLASS)
    return root


def _flagged(root: Path, *args: str) -> list[str]:
    run = run_cli("lint", "--select", RULE, "--format", "json", "--no-cache", *args, cwd=root)
    assert_no_traceback(run)
    return sorted(f["path"] for f in json.loads(run.out)["findings"])


def test_gitignored_files_are_skipped_by_default(tmp_path):
    root = _repo(tmp_path)
    assert _flagged(root, ".") == ["src/bad.py"]
    assert _flagged(root, "--no-respect-gitignore", ".") == ["generated/bad.py", "src/bad.py", "src/bad_tmp.py"]
    # a file named on the command line is linted even if ignored
    assert _flagged(root, "src/bad_tmp.py") == ["src/bad_tmp.py"]


def test_respect_gitignore_in_the_configuration(tmp_path):
    root = _repo(tmp_path)
    (root / "pyproject.toml").write_text("[tool.invariant-check]\nrespect-gitignore = false\n")
    assert len(_flagged(root, ".")) == 3
    assert _flagged(root, "--respect-gitignore", ".") == ["src/bad.py"]
    (root / "pyproject.toml").write_text('[tool.invariant-check]\nrespect-gitignore = "no"\n')
    run = run_cli("lint", ".", cwd=root)
    assert run.code == 2 and "respect-gitignore must be true or false" in run.err
