"""Output contracts: SARIF 2.1.0 against the official schema and GitHub's own requirements,
GitHub workflow commands, JSON, text."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import jsonschema
import pytest

from ic_support import (
    BAD_CLASS,
    EXPECTED_FLAGGED,
    RULE,
    assert_no_traceback,
    run_cli,
    write_tree,
)

from invariant_check.lint.engine import LintResult
from invariant_check.formats import render
from invariant_check.api.registry import all_rules
from invariant_check.api.types import FileError, Finding

SCHEMA_FILE = Path(__file__).parent / "sarif" / "sarif-schema-2.1.0.json"
SCHEMA_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"


@pytest.fixture(scope="module")
def validator():
    raw = SCHEMA_FILE.read_bytes()
    # the vendored file is the official one, unmodified (see tests/sarif/LICENSE.md)
    assert hashlib.sha256(raw).hexdigest() == SCHEMA_SHA256
    schema = json.loads(raw)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="module")
def sarif_run(tmp_path_factory):
    """One SARIF report with findings, an IC900, a syntax error, a path with a space and a
    finding outside the current folder (absolute path)."""
    root = tmp_path_factory.mktemp("sarif")
    tree = write_tree(root / "repo")
    (tree / "broken.py").write_text("class A:\n    def set_skip_topk(self:\n")
    (tree / "with space.py").write_text(BAD_CLASS)
    (tree / "unused.py").write_text("x = 1  # invariant-check: ignore[IC003]\n")
    outside = root / "outside"
    outside.mkdir()
    (outside / "ext.py").write_text(BAD_CLASS)
    run = run_cli(
        "lint", "--select", RULE, "--format", "sarif", "--warn-unused-ignores", "--no-cache",
        ".", str(outside / "ext.py"), cwd=tree,
    )
    assert_no_traceback(run)
    assert run.code == 2  # the syntax error
    return tree, outside, json.loads(run.out)


def test_sarif_validates_against_official_schema(validator, sarif_run):
    _, _, doc = sarif_run
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_schema_check_is_not_vacuous(validator, sarif_run):
    _, _, doc = sarif_run
    broken = copy.deepcopy(doc)
    del broken["version"]
    assert list(validator.iter_errors(broken))
    broken = copy.deepcopy(doc)
    broken["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    assert list(validator.iter_errors(broken))
    broken = copy.deepcopy(doc)
    broken["runs"][0]["results"][0]["unknownProperty"] = 1
    assert list(validator.iter_errors(broken))


def test_sarif_meets_github_code_scanning_requirements(sarif_run):
    tree, outside, doc = sarif_run
    assert doc["version"] == "2.1.0" and len(doc["runs"]) == 1
    run = doc["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "invariant-check" and driver["version"]
    rules = driver["rules"]
    ids = [r["id"] for r in rules]
    assert len(ids) == len(set(ids))
    for r in rules:
        assert r["id"] and r["name"]
        for key in ("shortDescription", "fullDescription", "help"):
            assert r[key]["text"].strip(), f"{r['id']} lacks {key}.text"
        assert not r["fullDescription"]["text"].startswith("#")  # prose, not a markdown heading
    assert RULE in ids and "IC900" in ids  # IC900 results need a descriptor too

    results = run["results"]
    assert results
    seen_paths = set()
    for res in results:
        assert res["ruleId"] in ids
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["level"] in ("error", "warning", "note", "none")
        assert res["message"]["text"]
        (loc,) = res["locations"]
        phys = loc["physicalLocation"]
        region = phys["region"]
        assert region["startLine"] >= 1 and region["startColumn"] >= 1
        assert (region["endLine"], region["endColumn"]) >= (region["startLine"], region["startColumn"])
        uri = phys["artifactLocation"]["uri"]
        assert " " not in uri  # percent-encoded
        parts = urlsplit(uri)
        if parts.scheme:
            assert parts.scheme == "file" and unquote(parts.path) == (outside / "ext.py").as_posix()
            assert "uriBaseId" not in phys["artifactLocation"]
        else:
            # relative to the checkout root, which code scanning maps onto the repository
            assert not uri.startswith("/") and ".." not in uri.split("/")
            assert (tree / unquote(uri)).is_file()
            assert phys["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        seen_paths.add(unquote(uri))
    assert {p for p in seen_paths if not p.startswith("file:")} >= EXPECTED_FLAGGED | {"with space.py"}
    assert any(res["ruleId"] == "IC900" for res in results)

    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is False
    notes = invocation["toolExecutionNotifications"]
    assert any("broken.py" in n["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for n in notes)


def test_sarif_lists_every_enabled_rule_even_without_results(tmp_path, validator):
    (tmp_path / "ok.py").write_text("x = 1\n")
    run = run_cli("lint", "--format", "sarif", "--no-cache", ".", cwd=tmp_path)
    assert run.code == 0
    doc = json.loads(run.out)
    assert not list(validator.iter_errors(doc))
    # every rule on by default: IC900 is opt-in, IC901 always on
    assert [r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]] == [c for c in all_rules() if c != "IC900"]
    assert doc["runs"][0]["results"] == []


# -- render-level contracts (inputs built here, output from the real renderers) ----------------


def _result(findings=(), errors=()) -> LintResult:
    return LintResult(findings=list(findings), errors=list(errors), files_seen=len(findings) + len(errors))


def _finding(path="a.py", message="msg", hint="do this", line=3, col=7) -> Finding:
    rule = all_rules()[RULE]
    return Finding(path, line, col, line, col + 4, RULE, rule.NAME, message, hint)


def test_github_escapes_properties_and_data():
    out = render(
        "github",
        _result([_finding(path="we,ird:name%.py", message="100% sure\nsecond")], [FileError("x,y.py", "cannot read: gone")]),
        list(all_rules().values()),
    )
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("::error file=we%2Cird%3Aname%25.py,line=3,col=7,")
    assert ",title=IC003::100%25 sure%0Asecond (hint: do this)" in lines[0]
    assert lines[1] == "::error file=x%2Cy.py,title=invariant-check::cannot read: gone"


def test_json_errors_omit_missing_positions():
    doc = json.loads(
        render(
            "json",
            _result(errors=[FileError("a.py", "cannot read: gone"), FileError("b.py", "syntax error: x", 2, 5)]),
            [],
        )
    )
    assert doc["errors"] == [
        {"path": "a.py", "message": "cannot read: gone"},
        {"path": "b.py", "message": "syntax error: x", "line": 2, "column": 5},
    ]
    assert doc["summary"]["errors"] == 2 and doc["summary"]["findings"] == 0


def test_text_summary_wording():
    rules = list(all_rules().values())
    one = render("text", _result([_finding()]), rules)
    assert one.splitlines()[-2] == "Found 1 finding in 1 file (1 file checked)."
    two = render("text", _result([_finding(), _finding(path="b.py")], [FileError("c.py", "x")]), rules)
    assert two.splitlines()[-2] == "Found 2 findings in 2 files; 1 file could not be linted (3 files checked)."
    clean = _result()
    clean.files_seen = 4
    assert render("text", clean, rules) == "All checks passed (4 files checked).\n"
    # nothing to check is not "all checks passed"
    assert render("text", _result(), rules) == "No Python file found (0 files checked).\n"


def test_text_ends_with_a_pointer_to_explain():
    rules = list(all_rules().values())
    one = render("text", _result([_finding()]), rules)
    assert one.splitlines()[-1] == f"Run `invariant-check explain {RULE}` for the rule's documentation and fix."
    other = Finding("b.py", 1, 1, 1, 2, "IC001", all_rules()["IC001"].NAME, "m", "h")
    two = render("text", _result([_finding(), other]), rules)
    assert two.splitlines()[-1] == f"Run `invariant-check explain CODE` (IC001, {RULE}) for a rule's documentation and fix."
    # nothing found: no pointer; errors only: no pointer either
    assert "explain" not in render("text", _result(errors=[FileError("c.py", "x")]), rules)


def test_text_quiet_prints_the_findings_only():
    rules = list(all_rules().values())
    quiet = render("text", _result([_finding()], [FileError("c.py", "x")]), rules, quiet=True)
    assert quiet == "a.py:3:7: IC003 msg\n    hint: do this\n"
    assert render("text", _result(), rules, quiet=True) == ""


def test_text_missing_paths_are_not_files_checked():
    rules = list(all_rules().values())
    result = _result(errors=[FileError("gone.py", "cannot open: no such file or directory")])
    result.files_seen = 0
    result.paths_not_found = 1
    assert render("text", result, rules).splitlines()[-1] == "1 path not found (0 files checked)."


def test_text_source_line_of_a_given_buffer(tmp_path, monkeypatch):
    # standard input: the caret goes under the buffer's line, not under the file on disk
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("on disk\n" * 5)
    out = render("text", _result([_finding()]), [], show_source=True, sources={"a.py": b"1\n2\nclass Predictor:\n"})
    assert "    class Predictor:\n          ^^^^\n" in out and "on disk" not in out


def test_text_colour_only_when_asked():
    rules = list(all_rules().values())
    assert "\x1b[" in render("text", _result([_finding()]), rules, color=True)
    assert "\x1b[" not in render("text", _result([_finding()]), rules, color=False)


def test_text_caret_under_bom_file(tmp_path, monkeypatch):
    # the BOM is not a character of the line: the caret must sit under the name
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + BAD_CLASS.encode())
    run = run_cli("lint", "--select", RULE, "--show-source", "--no-cache", "bom.py", cwd=tmp_path)
    lines = run.out.splitlines()
    i = next(i for i, l in enumerate(lines) if l.startswith("bom.py:3:7: IC003"))
    assert lines[i + 1] == "    class Predictor(nn.Module):"
    assert lines[i + 2] == "          ^^^^^^^^^"


def test_unknown_format_from_library_callers():
    with pytest.raises(ValueError, match="unknown format"):
        render("xml", _result(), [])


def test_text_error_lines_go_to_stderr_one_per_file(tmp_path):
    (tmp_path / "a.py").write_text("def set_skip_topk(:\n")
    (tmp_path / "b.py").write_bytes(b"def set_skip_topk(): return '\xff'\n")
    run = run_cli("lint", "--select", RULE, "--no-cache", ".", cwd=tmp_path)
    assert run.code == 2
    lines = run.err.splitlines()
    assert len(lines) == 2
    assert re.match(r"^a\.py:1:\d+: error: syntax error: ", lines[0])
    assert lines[1].startswith("b.py: error: cannot decode")


def test_text_caret_lines_up_after_tabs(tmp_path):
    (tmp_path / "tabs.py").write_text(BAD_CLASS.replace("class Predictor", "class\tPredictor"))
    run = run_cli("lint", "--select", RULE, "--show-source", "--no-cache", "tabs.py", cwd=tmp_path)
    lines = run.out.splitlines()
    i = next(i for i, l in enumerate(lines) if l.startswith("tabs.py:3:7: IC003"))
    assert lines[i + 1] == "    class   Predictor(nn.Module):"
    assert lines[i + 2] == "            ^^^^^^^^^"


def test_sarif_for_a_file_name_that_is_not_utf8(tmp_path, validator):
    name = os.fsdecode(b"caf\xe9.py")  # latin-1 bytes: a surrogate escape in Python
    (tmp_path / name).write_text(BAD_CLASS)
    run = run_cli("lint", "--select", RULE, "--format", "sarif", "--no-cache", ".", cwd=tmp_path)
    assert_no_traceback(run)
    assert run.code == 1, run.err
    doc = json.loads(run.out)
    assert not list(validator.iter_errors(doc))
    (result,) = doc["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "caf%E9.py"


def test_text_source_line_after_unusual_separators(tmp_path):
    # U+2028 and a form feed are not line ends for Python: the shown line must be line 3
    (tmp_path / "sep.py").write_text("# a\u2028b\x0cc\n" + BAD_CLASS.replace("import torch.nn as nn\n", ""), encoding="utf-8")
    run = run_cli("lint", "--select", RULE, "--show-source", "--no-cache", "sep.py", cwd=tmp_path)
    lines = run.out.splitlines()
    i = next(i for i, l in enumerate(lines) if l.startswith("sep.py:3:7: IC003"))
    assert lines[i + 1] == "    class Predictor(nn.Module):"


def test_sarif_results_carry_the_findings_data_like_json(sarif_run, tmp_path):
    tree, outside, doc = sarif_run
    results = [r for r in doc["runs"][0]["results"] if r["ruleId"] == RULE]
    assert results and all(isinstance(r.get("properties"), dict) and r["properties"] for r in results)
    as_json = run_cli("lint", "--select", RULE, "--format", "json", "--no-cache", ".", cwd=tree)
    data = {(f["path"], f["line"]): f["data"] for f in json.loads(as_json.out)["findings"]}
    compared = 0
    for r in results:
        loc = r["locations"][0]["physicalLocation"]
        key = (loc["artifactLocation"]["uri"].replace("%20", " "), loc["region"]["startLine"])
        if key in data:
            assert r["properties"] == data[key]
            compared += 1
    assert compared
