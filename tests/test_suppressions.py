"""`# invariant-check: ignore[...]`, bare `ignore`, `skip-file`, and `--warn-unused-ignores`,
through the real CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ic_support import RULE, assert_no_traceback, run_cli

from invariant_check.adoption import suppressions

HEAD = "import torch.nn as nn\n\n"


def findings(tmp_path: Path, code: str, *args: str) -> list[dict]:
    (tmp_path / "m.py").write_text(HEAD + code)
    run = run_cli("lint", "--select", RULE, "--format", "json", "--no-cache", *args, "m.py", cwd=tmp_path)
    assert_no_traceback(run)
    assert run.code in (0, 1), run.err
    return json.loads(run.out)["findings"]


def rules_at(found: list[dict]) -> list[tuple[str, int]]:
    return [(f["rule"], f["line"]) for f in found]


CLASS = "class P(nn.Module):{comment}\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n"


def test_unsuppressed_baseline(tmp_path):
    assert rules_at(findings(tmp_path, CLASS.format(comment=""))) == [(RULE, 3)]


@pytest.mark.parametrize(
    "comment",
    [
        "  # invariant-check: ignore[IC003]",
        "  # invariant-check: ignore",
        "  # invariant-check: ignore -- tested elsewhere",
        "  # invariant-check:ignore[IC003]",
        "  #invariant-check:  ignore[IC003]",
        "  # invariant-check: ignore[IC001, IC003]",
        "  # invariant-check: ignore[IC001,IC003]",
        "  # noqa: E501  # invariant-check: ignore[IC003] reason: tested elsewhere",
    ],
)
def test_suppressed_on_the_reported_line(tmp_path, comment):
    assert findings(tmp_path, CLASS.format(comment=comment)) == []


@pytest.mark.parametrize(
    "comment",
    [
        "  # invariant-check: ignore[IC001]",
        "  # noqa",  # a bare noqa is written for other tools
        "  # noqa: E501",
        "  # noqa E501",
        "  # type: ignore[attr-defined]",
    ],
)
def test_other_codes_do_not_suppress(tmp_path, comment):
    assert rules_at(findings(tmp_path, CLASS.format(comment=comment))) == [(RULE, 3)]


# Shaped like a suppression, spelt otherwise: nothing is suppressed, and IC901 gives the spelling.
NEAR_MISSES = [
    ("# invariant-check: ignore IC001", "# invariant-check: ignore[IC001]"),  # not the blanket form
    ("# invariant-check: ignore IC003", "# invariant-check: ignore[IC003]"),
    ("# invariant-check: ignore IC003, IC001 reason", "# invariant-check: ignore[IC003, IC001]"),
    ("# invariant-check: ignore because the caller compacts", "# invariant-check: ignore[CODE]"),
    ("# noqa IC003", "# noqa: IC003"),
    ("# noqa : IC003", "# noqa: IC003"),
    ("# noqa(IC003)", "# noqa: IC003"),
    ("# noqa: ic003", "# noqa: IC003"),
    ("# invariant-check ignore[IC003]", "# invariant-check: ignore[IC003]"),
    ("# invariant_check: ignore[IC003]", "# invariant-check: ignore[IC003]"),
    ("# invariantcheck: ignore[IC003]", "# invariant-check: ignore[IC003]"),
    ("# Invariant-Check: ignore[IC003]", "# invariant-check: ignore[IC003]"),
    ("# invariant-check : ignore[IC003]", "# invariant-check: ignore[IC003]"),
    ("# invariant-check= ignore[IC003]", "# invariant-check: ignore[IC003]"),
    ("# invariant-check: ignore [IC003]", "# invariant-check: ignore[IC003]"),
    ("# invariant-check: ignore(IC003)", "# invariant-check: ignore[IC003]"),
    ("# invariant-check: ignore: IC003", "# invariant-check: ignore[IC003]"),
    ("# invariant-check: ignore[ic003]", "# invariant-check: ignore[IC003]"),
    ("# invariant-check: ignore[IC001; IC003]", "# invariant-check: ignore[IC001, IC003]"),
    ("# invariant-check: ignore[IC001 IC003]", "# invariant-check: ignore[IC001, IC003]"),
    ("# invariant-check: ignore[IC001|IC003]", "# invariant-check: ignore[IC001, IC003]"),
    ("# invariant-check: IGNORE[IC003]", "# invariant-check: ignore[IC003]"),
    ("# invariant-check: disable[IC003]", "# invariant-check: ignore[IC003]"),
    ("# invariant-check: ignore[*]", "# invariant-check: ignore"),
    ("# invariant-check: ignore[all]", "# invariant-check: ignore"),
    (f"# invariant-check: ignore[{'REUSE-MODE-WITHOUT-COMPACTION-METHOD'}]",
     "# invariant-check: ignore[reuse-mode-without-compaction-method]"),
    ("# type: ignore[IC003]", "# invariant-check: ignore[IC003]"),
    ("# pylint: disable=IC003", "# invariant-check: ignore[IC003]"),
    ("# ruff: noqa: IC003", "# invariant-check: ignore[IC003]"),
]


@pytest.mark.parametrize("comment, spelling", NEAR_MISSES)
def test_a_near_miss_suppresses_nothing_and_ic901_spells_it(tmp_path, comment, spelling):
    found = findings(tmp_path, CLASS.format(comment=f"  {comment}"))
    # the finding stays, whatever the comment names: no near miss is read as a blanket ignore
    assert rules_at(found) == [(RULE, 3), ("IC901", 3)], found
    invalid = found[1]
    assert invalid["column"] == len("class P(nn.Module):  ") + 1
    assert f"`{comment.split(' reason')[0]}" in invalid["message"] and "suppresses nothing" in invalid["message"]
    assert invalid["hint"] == f"Write `{spelling}`."


def test_only_the_blanket_form_covers_every_rule(tmp_path):
    # IC003 is on the line: a near miss naming IC001 must not hide it
    code = CLASS.format(comment="  # invariant-check: ignore IC001")
    assert [f["rule"] for f in findings(tmp_path, code)] == [RULE, "IC901"]
    assert findings(tmp_path, CLASS.format(comment="  # invariant-check: ignore")) == []


def test_prose_that_mentions_the_tool_is_not_a_comment_to_check(tmp_path):
    code = "# Invariant check: the rows are compacted by the caller.\n# see invariant-check docs\nx = 1\n"
    assert findings(tmp_path, code) == []


def test_first_line_of_a_multiline_statement(tmp_path):
    # the class name (the reported node) is on line 4, the statement starts on line 3
    code = "class \\\n    P(nn.Module):\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n"
    assert rules_at(findings(tmp_path, code)) == [(RULE, 4)]
    suppressed = "class \\\n    P(nn.Module):  # invariant-check: ignore[IC003]\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n"
    assert findings(tmp_path, suppressed) == []
    # a comment cannot follow a backslash, so for that statement the reported line is the only
    # place; with brackets the comment can sit on the statement's first line
    first_line = "class P(  # invariant-check: ignore[IC003]\n    nn.Module,\n):\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n"
    assert findings(tmp_path, first_line) == []


def test_first_line_of_a_decorated_class(tmp_path):
    code = "@register  # invariant-check: ignore[IC003]\nclass P(nn.Module):\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n"
    assert findings(tmp_path, code) == []
    code = "@register\nclass P(nn.Module):\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n"
    assert rules_at(findings(tmp_path, code)) == [(RULE, 4)]


def test_comment_on_a_later_line_does_not_suppress(tmp_path):
    code = "class P(nn.Module):\n    def set_skip_topk(self, s):  # invariant-check: ignore[IC003]\n        self.layer.skip_topk = s\n"
    assert rules_at(findings(tmp_path, code)) == [(RULE, 3)]


def test_hash_inside_a_string_is_not_a_comment(tmp_path):
    code = (
        "class P(nn.Module):\n"
        '    """# invariant-check: skip-file"""\n'
        "    def set_skip_topk(self, s):\n"
        "        self.layer.skip_topk = s\n"
    )
    assert rules_at(findings(tmp_path, code)) == [(RULE, 3)]


def test_string_on_the_reported_line(tmp_path):
    code = 'class P(nn.Module, metaclass=M["# invariant-check: ignore"]):\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n'
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
    sups = suppressions.parse(b"a = 1  # invariant-check: ignore[IC001 , IC002]\nb = 2\n# invariant-check: ignore\n")
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


# -- names, noqa, and findings about the comments themselves ------------------------------------

NAME = "reuse-mode-without-compaction-method"


def lint_doc(tmp_path: Path, code: str, *args: str) -> dict:
    (tmp_path / "m.py").write_text(HEAD + code)
    run = run_cli("lint", "--format", "json", "--no-cache", *args, "m.py", cwd=tmp_path)
    assert_no_traceback(run)
    assert run.code in (0, 1), run.err
    return json.loads(run.out)


@pytest.mark.parametrize(
    "comment",
    [
        f"  # invariant-check: ignore[{NAME}]",
        f"  # invariant-check: ignore[IC001, {NAME}]",
        "  # noqa: IC003",
        "  # noqa:IC003,E501",
        "  # NOQA: E501 IC003",
        "  # type: ignore  # noqa: IC003",
    ],
)
def test_names_and_noqa_suppress(tmp_path, comment):
    assert findings(tmp_path, CLASS.format(comment=comment)) == []


def test_a_name_is_quoted_as_written_when_unused(tmp_path):
    code = CLASS.format(comment="") + f"x = 1  # invariant-check: ignore[{NAME}]\n"
    found = findings(tmp_path, code, "--warn-unused-ignores")
    assert rules_at(found) == [(RULE, 3), ("IC900", 6)]
    assert f"`# invariant-check: ignore[{NAME}]`" in found[1]["message"]
    assert f"`{NAME}` (IC003)" in found[1]["message"]


def test_each_unused_code_is_reported_on_its_own(tmp_path):
    # IC003 is used on the class line; IC001 (enabled too) is not: only IC001 is unused
    code = CLASS.format(comment="  # invariant-check: ignore[IC003, IC001]")
    doc = lint_doc(tmp_path, code, "--select", "IC001,IC003", "--warn-unused-ignores")
    (unused,) = doc["findings"]
    assert (unused["rule"], unused["line"]) == ("IC900", 3)
    assert unused["message"] == (
        "Unused suppression: `IC001` in `# invariant-check: ignore[IC003, IC001]` suppresses nothing on this line"
    )
    # a noqa's IC codes are checked the same way; other tools' codes are left alone
    doc = lint_doc(tmp_path, "x = 1  # noqa: E501, IC003\n", "--select", RULE, "--warn-unused-ignores")
    assert [(f["rule"], f["message"]) for f in doc["findings"]] == [
        ("IC900", "Unused suppression: `IC003` in `# noqa: E501, IC003` suppresses nothing on this line")
    ]


@pytest.mark.parametrize(
    "comment, quoted, needle",
    [
        ("# invariant-check: ignore[IC03]", "# invariant-check: ignore[IC03]", "Unknown rule `IC03` (did you mean IC003?)"),
        ("#invariant-check:ignore[ic003 , Ic02]", "#invariant-check:ignore[ic003 , Ic02]", "Unknown rule `Ic02`"),
        ("# invariant-check: ignore[reuse-mode]", "# invariant-check: ignore[reuse-mode]", "Unknown rule `reuse-mode`"),
        ("# invariant-check: ignore[IC00]", "# invariant-check: ignore[IC00]", "Unknown rule `IC00`"),  # no prefixes
        ("# invariant-check: ignore[]", "# invariant-check: ignore[]", "names no rule"),
        ("# invariant-check: ignroe[IC003]", "# invariant-check: ignroe[IC003]", "Unknown directive `ignroe`"),
        # an open bracket runs to the end of the comment
        ("# invariant-check: ignore[IC003", "# invariant-check: ignore[IC003 reason: tested", "not closed"),
        ("# invariant-check: skip-file[IC003]", "# invariant-check: skip-file[IC003]", "takes no codes"),
        ("# noqa: E501, IC33", "# noqa: E501, IC33", "Unknown rule `IC33`"),
    ],
)
def test_an_invalid_comment_is_always_reported(tmp_path, comment, quoted, needle):
    # no --warn-unused-ignores, and only IC003 selected: IC901 is still on
    code = f"x = 1  {comment} reason: tested\n"
    doc = lint_doc(tmp_path, code, "--select", RULE)
    (f,) = doc["findings"]
    assert (f["rule"], f["name"], f["line"], f["column"]) == ("IC901", "invalid-suppression", 3, 8)
    assert f"`{quoted}`" in f["message"] and needle in f["message"]
    assert f["end_column"] == 8 + len(quoted)
    assert "\n" not in f["message"] and f["hint"]


def test_an_unknown_code_does_not_stop_the_known_one(tmp_path):
    code = CLASS.format(comment="  # invariant-check: ignore[IC02, IC003]")
    assert rules_at(findings(tmp_path, code)) == [("IC901", 3)]


def test_ic901_is_turned_off_by_ignore_only(tmp_path):
    code = "x = 1  # invariant-check: ignore[IC03]\n"
    assert lint_doc(tmp_path, code, "--ignore", "IC901")["findings"] == []
    assert [f["rule"] for f in lint_doc(tmp_path, code, "--select", "IC001")["findings"]] == ["IC901"]
    (tmp_path / "pyproject.toml").write_text('[tool.invariant-check.per-file-ignores]\n"m.py" = ["IC901"]\n')
    assert lint_doc(tmp_path, code)["findings"] == []
    (tmp_path / "pyproject.toml").write_text('[tool.invariant-check]\nignore = ["invalid-suppression"]\n')
    assert lint_doc(tmp_path, code)["findings"] == []


def test_ic900_is_a_rule_like_the_others(tmp_path):
    code = "x = 1  # invariant-check: ignore\n"
    assert lint_doc(tmp_path, code)["findings"] == []  # opt-in
    for args in (["--warn-unused-ignores"], ["--extend-select", "IC900"], ["--select", "IC900"],
                 ["--select", "unused-suppression"], ["--select", "ALL"]):
        assert [f["rule"] for f in lint_doc(tmp_path, code, *args)["findings"]] == ["IC900"], args
    # ignore wins over the flag
    assert lint_doc(tmp_path, code, "--warn-unused-ignores", "--ignore", "IC900")["findings"] == []
    (tmp_path / "pyproject.toml").write_text('[tool.invariant-check]\nextend-select = ["IC900"]\n')
    assert [f["rule"] for f in lint_doc(tmp_path, code)["findings"]] == ["IC900"]
    (tmp_path / "pyproject.toml").write_text('[tool.invariant-check.per-file-ignores]\n"*.py" = ["IC900"]\n')
    assert lint_doc(tmp_path, code, "--warn-unused-ignores")["findings"] == []


def test_a_comment_naming_ic900_quiets_its_own_line(tmp_path):
    code = "x = 1  # invariant-check: ignore[IC003, IC900]\ny = 2  # invariant-check: ignore\n"
    doc = lint_doc(tmp_path, code, "--select", RULE, "--warn-unused-ignores")
    assert rules_at(doc["findings"]) == [("IC900", 4)]  # a bare ignore does not quiet itself


@pytest.mark.parametrize("code", ["IC900", "IC901", "unused-suppression", "invalid-suppression"])
def test_explain_and_rules_know_the_suppression_rules(tmp_path, code):
    run = run_cli("explain", code, cwd=tmp_path)
    assert run.code == 0, run.err
    assert run.out.startswith("# IC90") and "## What it does" in run.out and "```python" in run.out
    listed = run_cli("rules", cwd=tmp_path).out
    assert re.search(r"^IC900\s+unused-suppression\s", listed, re.M)
    assert re.search(r"^IC901\s+invalid-suppression\s", listed, re.M)


def test_parse_keeps_the_comment_verbatim_and_resolves_names():
    sups = suppressions.parse(f"a = 1  # invariant-check: ignore[IC001,  {NAME}]  reason\n".encode())
    (d,) = sups.by_line[1]
    assert d.text == f"# invariant-check: ignore[IC001,  {NAME}]"
    assert d.named == (("IC001", "IC001"), (NAME, "IC003")) and d.problems == []
    assert d.covers("IC003") and not d.covers("IC002")


def test_has_marker_is_cheap_and_sound():
    assert suppressions.has_marker(b"x  # invariant-check: ignore\n")
    assert suppressions.has_marker(b"x  # noqa: E501, IC003\n")
    assert suppressions.has_marker(b"x  # NOQA:IC003\n")
    assert not suppressions.has_marker(b"x  # noqa: E501\ny = 'IC003'\n")
    assert not suppressions.has_marker(b"x  # noqa\n")
    # near misses are read too, prose about the package is not
    assert suppressions.has_marker(b"x  # noqa IC003\n")
    assert suppressions.has_marker(b"x  # invariant_check: ignore[IC003]\n")
    assert suppressions.has_marker(b"x  # pylint: disable=IC003\n")
    assert not suppressions.has_marker(b"from invariant_check import compaction\n")
    assert not suppressions.has_marker(b"x = 'ic003'  # ignored\n")


# -- the parser never raises, whatever a comment holds ------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_PIECES = ["#", " ", "\t", "invariant", "-", "_", "check", ":", "=", "ignore", "IGNORE", "skip-file", "skip",
           "noqa", "NOQA", "[", "]", "(", ")", "{", "}", ",", ";", "|", "IC003", "ic003", "IC02", "*", "all",
           "--", "reason", "type", "pylint", "disable", "\ufeff", "é", "\\", "'", '"', NAME]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_PIECES), max_size=14))
def test_parse_never_raises_and_quotes_what_is_there(pieces):
    comment = "#" + "".join(pieces)
    sups = suppressions.parse(f"x = 1  {comment}\n".encode())
    for d in sups.all():
        assert d.text and d.text in comment
        assert d.kind in ("ignore", "noqa", "skip-file", "invalid")
        assert d.kind != "invalid" or d.problems  # a comment that suppresses nothing says why
        assert d.named is not None or (d.kind == "ignore" and not d.problems)  # only the bare form covers all


def test_a_head_without_a_directive_is_reported(tmp_path):
    for comment in ("# invariant-check:", "# invariant-check:\ufeff ignore[IC003]"):
        doc = lint_doc(tmp_path, f"x = 1  {comment}\n", "--select", RULE)
        assert [(f["rule"], f["hint"]) for f in doc["findings"]] == [("IC901", "Write `# invariant-check: ignore[CODE]`.")]
