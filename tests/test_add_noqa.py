"""`lint --add-noqa` through the real CLI: precise comments in this project's grammar with a
reason to fill in, merged with what the line holds, idempotent, counted."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from ic_support import assert_no_traceback, run_cli

HEAD = "import torch.nn as nn\n\n"
CLASS = "class {name}(nn.Module):{comment}\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n\n"


def lint(cwd: Path, *args: str):
    run = run_cli("lint", "--no-cache", *args, cwd=cwd)
    assert_no_traceback(run)
    return run


def findings(cwd: Path, *args: str) -> list[tuple[str, int]]:
    run = lint(cwd, "--format", "json", *args)
    return [(f["rule"], f["line"]) for f in json.loads(run.out)["findings"]]


def test_comments_are_added_merged_and_counted_and_a_second_run_adds_none(tmp_path):
    src = HEAD + "".join([
        CLASS.format(name="A", comment=""),
        CLASS.format(name="B", comment="  # noqa: E501"),
        CLASS.format(name="C", comment="  # invariant-check: ignore[IC001] -- checked by the caller"),
        CLASS.format(name="D", comment="  # noqa: IC001"),
        CLASS.format(name="E", comment="  # a note about E"),
    ])
    (tmp_path / "m.py").write_text(src)
    (tmp_path / "clean.py").write_text("x = 1\n")
    before = findings(tmp_path, ".")
    assert [r for r, _ in before] == ["IC003"] * 5
    run = lint(tmp_path, "--add-noqa", ".")
    assert run.code == 0 and run.out == ""
    assert "invariant-check: added 5 suppression comments (5 findings) in 1 file" in run.err
    lines = (tmp_path / "m.py").read_text().splitlines()
    assert lines[2] == "class A(nn.Module):  # invariant-check: ignore[IC003] -- TODO: reason"
    assert lines[6] == "class B(nn.Module):  # noqa: E501  # invariant-check: ignore[IC003] -- TODO: reason"
    assert lines[10] == "class C(nn.Module):  # invariant-check: ignore[IC001, IC003] -- checked by the caller"
    assert lines[14] == "class D(nn.Module):  # noqa: IC001, IC003"
    assert lines[18] == "class E(nn.Module):  # a note about E  # invariant-check: ignore[IC003] -- TODO: reason"
    assert (tmp_path / "clean.py").read_text() == "x = 1\n"
    # the comments suppress exactly those findings, and nothing is malformed
    assert findings(tmp_path, ".") == []
    after = (tmp_path / "m.py").read_text()
    again = lint(tmp_path, "--add-noqa", ".")
    assert again.code == 0 and "added 0 suppression comments (0 findings) in 0 files" in again.err
    assert (tmp_path / "m.py").read_text() == after


def test_findings_of_one_line_share_one_comment_with_sorted_codes(tmp_path):
    code = (HEAD + "class P(nn.Module):\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n\n"
            "x = 1  # invariant-check: ignore[IC02]\n")
    (tmp_path / "m.py").write_text(code)
    run = lint(tmp_path, "--add-noqa", "m.py")
    # IC901 (the misspelt comment) gets no comment: the fix is to the comment
    assert "added 1 suppression comment (1 finding) in 1 file; 1 finding about comments or baseline entries left to fix" in run.err
    assert findings(tmp_path, "m.py") == [("IC901", 7)]


def test_line_endings_encoding_marker_and_mode_are_kept(tmp_path):
    path = tmp_path / "m.py"
    path.write_bytes(b"\xef\xbb\xbf" + (HEAD + CLASS.format(name="A", comment="")).replace("\n", "\r\n").encode())
    path.chmod(0o750)
    assert lint(tmp_path, "--add-noqa", "m.py").code == 0
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and b"\n" not in data.replace(b"\r\n", b"")
    assert b"class A(nn.Module):  # invariant-check: ignore[IC003] -- TODO: reason\r\n" in data
    assert stat.S_IMODE(path.stat().st_mode) == 0o750
    assert findings(tmp_path, "m.py") == []


def test_a_line_that_cannot_hold_a_comment_is_listed_and_left(tmp_path):
    code = HEAD + "class A(nn.Module, \\\n        metaclass=type):\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n"
    (tmp_path / "m.py").write_text(code)
    assert findings(tmp_path, "m.py") == [("IC003", 3)]
    run = lint(tmp_path, "--add-noqa", "m.py")
    assert "m.py:3: no comment can go on this line (it ends inside a string or with a backslash); IC003 stays" in run.err
    assert (tmp_path / "m.py").read_text() == code


def test_with_a_baseline_only_the_new_findings_get_comments(tmp_path):
    (tmp_path / "old.py").write_text(HEAD + CLASS.format(name="Old", comment=""))
    lint(tmp_path, "--write-baseline", "b.json", ".")
    (tmp_path / "new.py").write_text(HEAD + CLASS.format(name="New", comment=""))
    run = lint(tmp_path, "--baseline", "b.json", "--add-noqa", ".")
    assert "added 1 suppression comment (1 finding) in 1 file" in run.err
    assert "invariant-check" not in (tmp_path / "old.py").read_text()
    assert "ignore[IC003]" in (tmp_path / "new.py").read_text()
    assert lint(tmp_path, "--add-noqa", "--write-baseline", "b.json", ".").code == 2
