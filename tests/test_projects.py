"""The nearest configuration per file (invariant_check/lint/projects.py), as ruff does it."""

from __future__ import annotations

import json
from pathlib import Path

from ic_support import BAD_CLASS, RULE, assert_no_traceback, run_cli

IGNORE_IT = f'[tool.invariant-check]\nignore = ["{RULE}"]\n'


def _files(root: Path, *rels: str) -> Path:
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(BAD_CLASS)
    return root


def _flagged(cwd: Path, *args: str) -> list[str]:
    run = run_cli("lint", "--format", "json", "--no-cache", *args, cwd=cwd)
    assert_no_traceback(run)
    assert run.code in (0, 1), run.err
    return sorted(f["path"] for f in json.loads(run.out)["findings"] if f["rule"] == RULE)


def test_each_path_gets_its_nearest_configuration(tmp_path):
    # the case: `lint sub other` used the common parent's configuration for both
    _files(tmp_path, "sub/a.py", "other/b.py")
    (tmp_path / "other" / "pyproject.toml").write_text(IGNORE_IT)
    assert _flagged(tmp_path, "sub", "other") == ["sub/a.py"]
    assert _flagged(tmp_path, "sub/a.py", "other/b.py") == ["sub/a.py"]


def test_a_configuration_found_while_walking_governs_its_folder(tmp_path):
    _files(tmp_path, "a.py", "vendored/b.py", "vendored/deep/c.py")
    (tmp_path / "pyproject.toml").write_text("[tool.invariant-check]\n")
    (tmp_path / "vendored" / "pyproject.toml").write_text(IGNORE_IT)
    assert _flagged(tmp_path, ".") == ["a.py"]
    # a pyproject.toml without our table is passed over
    (tmp_path / "vendored" / "pyproject.toml").write_text('[project]\nname = "v"\n')
    assert _flagged(tmp_path, ".") == ["a.py", "vendored/b.py", "vendored/deep/c.py"]


def test_globs_are_relative_to_their_own_configuration(tmp_path):
    _files(tmp_path, "tests/a.py", "lib/tests/b.py", "lib/c.py", "lib/gen/d.py")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.invariant-check.per-file-ignores]\n"tests/*" = ["IC003"]\n'
    )
    (tmp_path / "lib" / "pyproject.toml").write_text(
        '[tool.invariant-check]\nextend-exclude = ["gen"]\n'
        '[tool.invariant-check.per-file-ignores]\n"tests/*" = ["IC003"]\n'
    )
    # lib/tests is lib's `tests/*`; lib/gen is excluded by lib's configuration only
    assert _flagged(tmp_path, ".") == ["lib/c.py"]
    assert _flagged(tmp_path / "lib", ".") == ["c.py"]


def test_a_parent_configuration_does_not_leak_into_a_nested_one(tmp_path):
    _files(tmp_path, "a.py", "sub/b.py")
    (tmp_path / "pyproject.toml").write_text(IGNORE_IT)
    (tmp_path / "sub" / "pyproject.toml").write_text("[tool.invariant-check]\n")
    assert _flagged(tmp_path, ".") == ["sub/b.py"]


def test_config_option_applies_one_configuration_to_every_file(tmp_path):
    _files(tmp_path, "sub/a.py", "other/b.py")
    (tmp_path / "other" / "pyproject.toml").write_text("[tool.invariant-check]\n")
    (tmp_path / "all.toml").write_text(f'ignore = ["{RULE}"]\n')
    assert _flagged(tmp_path, "--config", "all.toml", "sub", "other") == []


def test_one_report_and_one_exit_status(tmp_path):
    _files(tmp_path, "one/a.py", "two/b.py")
    (tmp_path / "one" / "pyproject.toml").write_text("[tool.invariant-check]\n")
    (tmp_path / "two" / "pyproject.toml").write_text("[tool.invariant-check]\n")
    run = run_cli("lint", "--select", RULE, "--no-cache", ".", cwd=tmp_path)
    assert run.code == 1
    assert run.out.count("Found ") == 1
    assert "Found 2 findings in 2 files (2 files checked)." in run.out
    # each project keeps its cache beside its configuration
    cached = run_cli("lint", "--select", RULE, ".", cwd=tmp_path)
    assert cached.code == 1
    assert list((tmp_path / "one" / ".invariant-check-cache").glob("*.json"))
    assert list((tmp_path / "two" / ".invariant-check-cache").glob("*.json"))


def test_a_broken_nested_configuration_is_one_line_exit_2(tmp_path):
    _files(tmp_path, "a.py", "sub/b.py")
    (tmp_path / "sub" / "pyproject.toml").write_text("[tool.invariant-check]\nselct = []\n")
    run = run_cli("lint", ".", cwd=tmp_path)
    assert_no_traceback(run)
    assert run.code == 2
    (line,) = run.err.strip().splitlines()
    assert "sub/pyproject.toml" in line and "selct" in line
