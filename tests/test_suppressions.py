"""`# invariant-check: ignore[...]`, bare `ignore`, `skip-file`, and `--warn-unused-ignores`,
through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ic_support import RULE, assert_no_traceback, run_cli

from invariant_check import suppressions

HEAD = "import torch.nn as nn\n\n"


def findings(tmp_path: Path, code: str, *args: str) -> list[dict]:
    (tmp_path / "m.py").write_text(HEAD + code)
    run = run_cli("lint", "--select", RULE, "--format", "json", "--no-cache", *args, "m.py", cwd=tmp_path)
    assert_no_traceback(run)
    assert run.code in (0, 1), run.err
    return json.loads(run.out)["findings"]


def rules_at(found: list[dict]) -> list[tuple[str, int]]:
    return [(f["rule"], f["line"]) for f in found]


CLASS = "class P(nn.Module):{comment}\n    def set_skip_topk(self, s):\n        pass\n"


def test_unsuppressed_baseline(tmp_path):
    assert rules_at(findings(tmp_path, CLASS.format(comment=""))) == [(RULE, 3)]


@pytest.mark.parametrize(
    "comment",
    [
        "  # invariant-check: ignore[IC003]",
        "  # invariant-check: ignore",
        "  # invariant-check:ignore[ic003]",
        "  # invariant-check: ignore[IC001, IC003]",
        "  # invariant-check: ignore [IC003]",
        "  # noqa: E501  # invariant-check: ignore[IC003] reason: tested elsewhere",
    ],
)
def test_suppressed_on_the_reported_line(tmp_path, comment):
    assert findings(tmp_path, CLASS.format(comment=comment)) == []


@pytest.mark.parametrize(
    "comment",
    [
        "  # invariant-check: ignore[IC001]",
        "  # invariant-check: ignore [IC001]",  # a space must not turn it into a bare ignore
        "  # invariant-check: ignore[]",
        "  # invariant-check ignore[IC003]",
    ],
)
def test_other_codes_do_not_suppress(tmp_path, comment):
    assert rules_at(findings(tmp_path, CLASS.format(comment=comment))) == [(RULE, 3)]


def test_first_line_of_a_multiline_statement(tmp_path):
    # the class name (the reported node) is on line 4, the statement starts on line 3
    code = "class \\\n    P(nn.Module):\n    def set_skip_topk(self, s):\n        pass\n"
    assert rules_at(findings(tmp_path, code)) == [(RULE, 4)]
    suppressed = "class \\\n    P(nn.Module):  # invariant-check: ignore[IC003]\n    def set_skip_topk(self, s):\n        pass\n"
    assert findings(tmp_path, suppressed) == []
    # a comment cannot follow a backslash, so for that statement the reported line is the only
    # place; with brackets the comment can sit on the statement's first line
    first_line = "class P(  # invariant-check: ignore[IC003]\n    nn.Module,\n):\n    def set_skip_topk(self, s):\n        pass\n"
    assert findings(tmp_path, first_line) == []


def test_first_line_of_a_decorated_class(tmp_path):
    code = "@register  # invariant-check: ignore[IC003]\nclass P(nn.Module):\n    def set_skip_topk(self, s):\n        pass\n"
    assert findings(tmp_path, code) == []
    code = "@register\nclass P(nn.Module):\n    def set_skip_topk(self, s):\n        pass\n"
    assert rules_at(findings(tmp_path, code)) == [(RULE, 4)]


def test_comment_on_a_later_line_does_not_suppress(tmp_path):
    code = "class P(nn.Module):\n    def set_skip_topk(self, s):  # invariant-check: ignore[IC003]\n        pass\n"
    assert rules_at(findings(tmp_path, code)) == [(RULE, 3)]


def test_hash_inside_a_string_is_not_a_comment(tmp_path):
    code = (
        "class P(nn.Module):\n"
        '    """# invariant-check: skip-file"""\n'
        "    def set_skip_topk(self, s):\n"
        "        pass\n"
    )
    assert rules_at(findings(tmp_path, code)) == [(RULE, 3)]


def test_string_on_the_reported_line(tmp_path):
    code = 'class P(nn.Module, metaclass=M["# invariant-check: ignore"]):\n    def set_skip_topk(self, s):\n        pass\n'
    assert rules_at(findings(tmp_path, code)) == [(RULE, 3)]


def test_skip_file(tmp_path):
    code = "# invariant-check: skip-file\n" + CLASS.format(comment="")
    assert findings(tmp_path, code) == []
    # anywhere in the file, as a comment
    code = CLASS.format(comment="") + "# invariant-check: skip-file\n"
    assert findings(tmp_path, code) == []


def test_warn_unused_ignores(tmp_path):
    code = (
        CLASS.format(comment="  # invariant-check: ignore[IC003]")  # used
        + "x = 1  # invariant-check: ignore[IC003]\n"  # unused
        + "y = 2  # invariant-check: ignore\n"  # unused, bare
    )
    assert findings(tmp_path, code) == []
    found = findings(tmp_path, code, "--warn-unused-ignores")
    assert rules_at(found) == [("IC900", 6), ("IC900", 7)]
    assert all(f["name"] == "unused-suppression" for f in found)
    assert found[0]["column"] == len("x = 1  ") + 1
    run = run_cli("lint", "--select", RULE, "--warn-unused-ignores", "--no-cache", "m.py", cwd=tmp_path)
    assert run.code == 1


def test_unused_ignore_for_a_rule_switched_off_is_not_reported(tmp_path):
    code = "x = 1  # invariant-check: ignore[IC001]\n"
    # IC001 is not enabled in this run (--select IC003): its comment may be used by a full run
    assert findings(tmp_path, code, "--warn-unused-ignores") == []


def test_unused_ignores_in_a_skipped_file_are_not_reported(tmp_path):
    code = "# invariant-check: skip-file\nx = 1  # invariant-check: ignore[IC003]\n"
    assert findings(tmp_path, code, "--warn-unused-ignores") == []


def test_unused_ignore_in_a_file_without_triggers(tmp_path):
    # the prefilter never parses this file; its comment still suppresses nothing
    (tmp_path / "m.py").write_text("x = 1  # invariant-check: ignore[IC003]\n")
    run = run_cli("lint", "--select", RULE, "--warn-unused-ignores", "--format", "json", "--no-cache", ".", cwd=tmp_path)
    assert rules_at(json.loads(run.out)["findings"]) == [("IC900", 1)]


# -- the parser alone ---------------------------------------------------------------------------


def test_parse_reads_codes_lines_and_columns():
    sups = suppressions.parse(b"a = 1  # invariant-check: ignore[ic001 , IC002]\nb = 2\n# invariant-check: ignore\n")
    assert not sups.skip_file
    (first,) = sups.by_line[1]
    assert first.codes == frozenset({"IC001", "IC002"}) and first.column == 8
    (bare,) = sups.by_line[3]
    assert bare.codes is None and bare.covers("IC777")
    assert sups.match("IC002", (5, 1)) and not sups.match("IC003", (1,))


def test_parse_without_marker_is_empty_and_cheap():
    sups = suppressions.parse(b"x = '#'  # ignore\n")
    assert sups.by_line == {} and not sups.skip_file


def test_parse_untokenizable_file_falls_back_to_lines():
    sups = suppressions.parse(b"x = (\n  # invariant-check: ignore[IC003]\n")
    assert 2 in sups.by_line


def test_parse_bom_and_crlf():
    sups = suppressions.parse(b"\xef\xbb\xbf# invariant-check: skip-file\r\nx = 1\r\n")
    assert sups.skip_file


def test_unused_ignores_in_an_unparseable_file_are_not_reported(tmp_path):
    (tmp_path / "m.py").write_text("def set_skip_topk(:  # invariant-check: ignore[IC003]\n")
    run = run_cli("lint", "--select", RULE, "--warn-unused-ignores", "--format", "json", "--no-cache", ".", cwd=tmp_path)
    assert_no_traceback(run)
    doc = json.loads(run.out)
    assert run.code == 2 and [e["path"] for e in doc["errors"]] == ["m.py"]
    assert doc["findings"] == []


@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_suppressions_with_other_line_endings(tmp_path, newline):
    code = (HEAD + CLASS.format(comment="  # invariant-check: ignore[IC003]")).replace("\n", newline)
    (tmp_path / "m.py").write_bytes(code.encode())
    run = run_cli("lint", "--select", RULE, "--warn-unused-ignores", "--format", "json", "--no-cache", "m.py", cwd=tmp_path)
    assert run.code == 0, run.out
    unsuppressed = (HEAD + CLASS.format(comment="") + "x = 1  # invariant-check: ignore[IC003]\n").replace("\n", newline)
    (tmp_path / "m.py").write_bytes(unsuppressed.encode())
    run = run_cli("lint", "--select", RULE, "--warn-unused-ignores", "--format", "json", "--no-cache", "m.py", cwd=tmp_path)
    assert rules_at(json.loads(run.out)["findings"]) == [(RULE, 3), ("IC900", 6)]


def test_parse_fallback_does_not_repeat_comments():
    # tokenizing fails at the end (open bracket); the comments already read are not read again
    sups = suppressions.parse(b"a = 1  # invariant-check: ignore[IC003]\nx = (\n  # invariant-check: ignore[IC001]\n")
    assert sorted((line, len(s)) for line, s in sups.by_line.items()) == [(1, 1), (3, 1)]
