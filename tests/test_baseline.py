"""Baselines through the real CLI: `--write-baseline`, `--baseline`, the configuration's
`baseline`, fingerprints that survive edits, counts, unused entries (IC902) only within the run's
reach, standard input, and bad files."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from ic_support import EXPECTED_FLAGGED, assert_no_traceback, run_cli, write_tree

BASELINE = "ic-baseline.json"


def lint(cwd: Path, *args: str):
    run = run_cli("lint", "--no-cache", *args, cwd=cwd)
    assert_no_traceback(run)
    return run


def lint_json(cwd: Path, *args: str) -> tuple[int, dict]:
    run = lint(cwd, "--format", "json", *args)
    assert run.code in (0, 1), run.err
    return run.code, json.loads(run.out)


def found(doc: dict) -> list[tuple[str, str, int]]:
    return [(f["path"], f["rule"], f["line"]) for f in doc["findings"]]


@pytest.fixture
def tree(tmp_path) -> Path:
    write_tree(tmp_path)
    written = lint(tmp_path, "--write-baseline", BASELINE, ".")
    assert written.code == 0 and written.out == "", written.err
    assert f"wrote {BASELINE}: 11 findings in 11 files (11 entries)" in written.err
    return tmp_path


def test_a_tree_with_findings_starts_green(tree):
    code, doc = lint_json(tree, "--baseline", BASELINE, ".")
    assert code == 0 and doc["findings"] == [] and doc["summary"]["baselined"] == len(EXPECTED_FLAGGED)
    run = lint(tree, "--baseline", BASELINE, ".")
    assert run.code == 0 and run.out.strip().endswith(f"checked; {len(EXPECTED_FLAGGED)} more in the baseline).")
    # without it, every finding is back
    code, doc = lint_json(tree, ".")
    assert code == 1 and {p for p, _, _ in found(doc)} == EXPECTED_FLAGGED and "baselined" not in doc["summary"]


def test_the_file_is_versioned_sorted_one_entry_per_line_and_stable(tree):
    text = (tree / BASELINE).read_text()
    doc = json.loads(text)
    assert doc["version"] == 1 and len(doc["entries"]) == len(EXPECTED_FLAGGED)
    keys = [(e["path"], e["rule"], e["function"], e["statement"]) for e in doc["entries"]]
    assert keys == sorted(keys)
    entry_lines = [l for l in text.splitlines() if l.strip().startswith('{"path"')]
    assert len(entry_lines) == len(EXPECTED_FLAGGED)
    assert doc["entries"][0] == {"path": "pkg/bad.py", "rule": "IC003", "function": "Bad",
                                 "statement": "class Bad(nn.Module):", "count": 1}
    # written again, in another order of paths: the same bytes
    lint(tree, "--write-baseline", BASELINE, "pkg/sub", "pkg")
    assert (tree / BASELINE).read_text() == text


def test_edits_above_a_finding_and_reformatting_keep_it_matched(tree):
    bad = tree / "pkg" / "bad.py"
    src = bad.read_text()
    edited = ('"""A docstring added above."""\n\nimport os\n\n\n'
              + src.replace("class Bad(nn.Module):", "class Bad(  # a comment\n    nn.Module,\n):"))
    bad.write_text(edited)
    code, doc = lint_json(tree, "--baseline", BASELINE, ".")
    assert code == 0 and doc["findings"] == [], doc["findings"]


def test_a_new_finding_is_reported_and_a_vanished_one_is_ic902(tree):
    bad = tree / "pkg" / "bad.py"
    bad.write_text(bad.read_text() + "\n\nclass Worse(nn.Module):\n    def set_skip_topk(self, skip):\n        self.layer.skip_topk = skip\n")
    m1 = tree / "pkg" / "many" / "m1.py"
    m1.write_text(m1.read_text().replace("Many1", "Renamed1"))
    code, doc = lint_json(tree, "--baseline", BASELINE, ".")
    assert code == 1
    entry_line = next(i for i, l in enumerate((tree / BASELINE).read_text().splitlines(), 1) if "pkg/many/m1.py" in l)
    assert found(doc) == [(BASELINE, "IC902", entry_line), ("pkg/bad.py", "IC003", 8), ("pkg/many/m1.py", "IC003", 3)]
    unused = doc["findings"][0]
    assert unused["name"] == "unused-baseline-entry" and unused["column"] == 1
    assert unused["message"] == ("Unused baseline entry: IC003 in `Many1` of pkg/many/m1.py at "
                                 "`class Many1(nn.Module):` matches no finding")
    # the baseline file in use, not a placeholder
    assert f"`invariant-check lint --write-baseline {BASELINE}`" in unused["hint"] and "FILE" not in unused["hint"]
    # turned off like any rule
    code, doc = lint_json(tree, "--baseline", BASELINE, "--ignore", "IC902", ".")
    assert "IC902" not in {r for _, r, _ in found(doc)}


def test_counts_absorb_that_many_identical_findings(tmp_path):
    twice = "import torch.nn as nn\n\nclass P(nn.Module):\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n"
    (tmp_path / "m.py").write_text(twice + "\n" + twice)
    lint(tmp_path, "--write-baseline", BASELINE, ".")
    (entry,) = json.loads((tmp_path / BASELINE).read_text())["entries"]
    assert entry["count"] == 2 and entry["function"] == "P"
    assert lint_json(tmp_path, "--baseline", BASELINE, ".")[1]["findings"] == []
    (tmp_path / "m.py").write_text(twice + "\n" + twice + "\n" + twice)
    assert found(lint_json(tmp_path, "--baseline", BASELINE, ".")[1]) == [("m.py", "IC003", 15)]
    (tmp_path / "m.py").write_text(twice)
    (unused,) = lint_json(tmp_path, "--baseline", BASELINE, ".")[1]["findings"]
    assert unused["rule"] == "IC902" and "(1 of 2 no longer found)" in unused["message"]


def test_unused_entries_only_within_the_runs_reach(tree):
    m1 = tree / "pkg" / "many" / "m1.py"
    m1.write_text(m1.read_text().replace("Many1", "Renamed1"))
    (tree / "pkg" / "many" / "m2.py").unlink()
    # a run on other files (a pre-commit batch) says nothing about m1's or m2's entries
    code, doc = lint_json(tree, "--baseline", BASELINE, "pkg/bad.py", "pkg/sub")
    assert code == 0 and doc["findings"] == []
    # the file itself: its entry is unused (and its finding is new)
    assert {r for _, r, _ in found(lint_json(tree, "--baseline", BASELINE, "pkg/many/m1.py")[1])} == {"IC902", "IC003"}
    # a deleted file under a folder that was linted: its entry is unused
    rules_paths = [(r, f["message"]) for f in lint_json(tree, "--baseline", BASELINE, "pkg/many")[1]["findings"]
                   for r in [f["rule"]]]
    assert sum("pkg/many/m2.py" in m for r, m in rules_paths if r == "IC902") == 1
    # entries of a rule that is not on in the run are not unused
    code, doc = lint_json(tree, "--baseline", BASELINE, "--select", "IC001,IC902", ".")
    assert doc["findings"] == []


def test_the_configurations_baseline_is_relative_to_its_folder(tree):
    (tree / "pyproject.toml").write_text(f'[tool.invariant-check]\nbaseline = "{BASELINE}"\n')
    sub = tree / "pkg"
    code, doc = lint_json(sub, ".")  # run from below: the baseline is still found
    assert code == 0 and doc["findings"] == [] and doc["summary"]["baselined"] == len(EXPECTED_FLAGGED)
    code, doc = lint_json(sub, "--no-baseline", ".")
    assert code == 1 and len(doc["findings"]) == len(EXPECTED_FLAGGED)
    # --baseline is relative to the current folder, and replaces the configuration's
    os.rename(tree / BASELINE, tree / "elsewhere.json")
    run = lint(sub, ".")
    assert run.code == 2 and f"{tree / BASELINE}: baseline file not found" in run.err
    code, doc = lint_json(sub, "--baseline", "../elsewhere.json", ".")
    assert code == 0 and doc["summary"]["baselined"] == len(EXPECTED_FLAGGED)


@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "baseline file not found (write one with `invariant-check lint --write-baseline"),
        ("{not json", "not a baseline file: invalid JSON"),
        ('{"version": 2, "entries": []}', "baseline version 2 is not supported"),
        ('{"version": 1, "entries": [{"path": "a.py"}]}', "entry 1 is not"),
        ("[]", "not a baseline file"),
    ],
)
def test_a_bad_baseline_file_is_one_line_and_exit_2(tmp_path, content, needle):
    (tmp_path / "m.py").write_text("x = 1\n")
    if content is not None:
        (tmp_path / BASELINE).write_text(content)
    run = lint(tmp_path, "--baseline", BASELINE, ".")
    assert run.code == 2 and run.out == ""
    (line,) = run.err.strip().splitlines()
    assert line.startswith(f"invariant-check: error: {BASELINE}: ") and needle in line


def test_writing_over_a_baseline_keeps_the_entries_of_files_not_linted(tree):
    before = json.loads((tree / BASELINE).read_text())["entries"]
    (tree / "pkg" / "bad.py").write_text("x = 1\n")  # fixed
    run = lint(tree, "--write-baseline", BASELINE, "pkg/bad.py")
    assert run.code == 0 and "kept 10 of files this run did not lint" in run.err
    after = json.loads((tree / BASELINE).read_text())["entries"]
    assert after == [e for e in before if e["path"] != "pkg/bad.py"]


def test_standard_input_is_matched_as_the_file_it_names(tree):
    src = (tree / "pkg" / "bad.py").read_text()
    run = run_cli("lint", "--no-cache", "--baseline", BASELINE, "--format", "json", "-", "--stdin-filename",
                  "pkg/bad.py", cwd=tree, input="# unsaved edit\n" + src)
    assert run.code == 0 and json.loads(run.out)["summary"]["baselined"] == 1
    run = run_cli("lint", "--no-cache", "--baseline", BASELINE, "-", "--stdin-filename", "pkg/bad.py", cwd=tree,
                  input=src.replace("Bad", "Other"))
    assert run.code == 1 and "IC902" in run.out and "IC003" in run.out
    for flag in (["--write-baseline", "x.json"], ["--add-noqa"]):
        run = run_cli("lint", *flag, "-", "--stdin-filename", "pkg/bad.py", cwd=tree, input=src)
        assert run.code == 2 and "cannot be used with standard input" in run.err


def test_statement_fingerprints():
    from invariant_check.adoption.baseline import MODULE, SourceFacts, normalize

    src = (
        "import x\n"
        "class A(Base):\n"
        "    @deco\n"
        "    def run(self, md):  # note\n"
        "        for g in groups:\n"
        "            md = build(\n"
        "                g,  # a comment\n"
        "                step=1,\n"
        "            )\n"
        "        check(md); other()\n"
        "        return md\n"
        "y = f(a , b)  # invariant-check: ignore[IC001]\n"
    )
    facts = SourceFacts(src)
    assert facts.function(6) == "A.run" and facts.function(3) == "A.run" and facts.function(2) == "A"
    assert facts.function(12) == MODULE
    assert facts.statement(5, 9) == "for g in groups:"  # a header, not the loop's body
    assert facts.statement(7, 17) == "md=build(g,step=1)"
    assert facts.statement(10, 9) == "check(md)" and facts.statement(10, 20) == "other()"
    assert facts.statement(4, 9) == "def run(self,md):"
    assert facts.statement(12, 1) == "y=f(a,b)"
    assert facts.statement(12, 16) == "# invariant-check: ignore[IC001]"  # a finding on the comment
    assert normalize("f( a,\n   b, )") == normalize("f(a, b)")


def test_each_configuration_applies_its_own_baseline(tmp_path):
    bad = "import torch.nn as nn\n\nclass P(nn.Module):\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "pyproject.toml").write_text(f'[tool.invariant-check]\nbaseline = "{BASELINE}"\n')
        (tmp_path / name / "m.py").write_text(bad)
        assert lint(tmp_path / name, "--write-baseline", BASELINE, ".").code == 0
    assert json.loads((tmp_path / "a" / BASELINE).read_text())["entries"][0]["path"] == "m.py"
    code, doc = lint_json(tmp_path, "a", "b")  # one run, two configurations, two baselines
    assert code == 0 and doc["summary"]["baselined"] == 2
    (tmp_path / "b" / "m.py").write_text("x = 1\n")
    code, doc = lint_json(tmp_path, "a", "b")
    assert found(doc) == [(f"b/{BASELINE}", "IC902", 6)] and doc["summary"]["baselined"] == 1
