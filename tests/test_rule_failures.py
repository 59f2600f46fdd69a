"""A rule that raises on a file (issue 22): the run goes on, the failure is one error naming the
rule, the file and the line of the definition being checked, every other finding of that file
still counts, and `INVARIANT_CHECK_DEBUG=1` prints the rule's traceback.

The failure is a fault injected into the real IC004 (its `_known` raises for one object name),
run through the real command in a subprocess, so that exit status, stderr and the cache are
what a user gets.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from ic_support import clean_env, run_cli

METADATA = """
from dataclasses import dataclass


@dataclass
class CommonAttentionMetadata:
    seq_lens: "torch.Tensor"
    max_seq_len: int
"""

# IC004 in good_step (line 7) and, but for the injected fault, in bad_step (line 13);
# IC003 in Predictor (line 17).
DRAFTER = """
import torch.nn as nn
from .metadata import CommonAttentionMetadata


def good_step(self, md: CommonAttentionMetadata):
    for _ in range(self.k):
        md.seq_lens += 1
        self.model(md)


def bad_step(self, broken: CommonAttentionMetadata):
    for _ in range(self.k):
        broken.seq_lens += 1
        self.model(broken)


class Predictor(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip
"""

# Runs the real CLI with IC004's `_known` (its analysis, `analysis/stale_derived.py`) made to
# fail on the object named `broken`.
LAUNCHER = """
import sys
import invariant_check.analysis.stale_derived as ic004
from invariant_check.cli.commands import main

real = ic004._known

def faulty(view, func, obj, aliases):
    if obj == "broken":
        raise TypeError("injected fault")
    return real(view, func, obj, aliases)

ic004._known = faulty
sys.argv = ["invariant-check", *sys.argv[1:]]
main()
"""


def _project(root: Path, pyproject: str = "") -> Path:
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "metadata.py").write_text(textwrap.dedent(METADATA).lstrip())
    (root / "pkg" / "drafter.py").write_text(textwrap.dedent(DRAFTER).lstrip())
    (root / "launch.py").write_text(LAUNCHER)
    if pyproject:
        (root / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    return root


def _lint(root: Path, *args: str, debug: bool = False):
    env = clean_env(**({"INVARIANT_CHECK_DEBUG": "1"} if debug else {}))
    # `python -m invariant_check.cli.commands` is what run_cli starts; the launcher replaces it
    return run_cli("lint", "--format", "json", *args, "pkg", cwd=root, env=env, launcher=root / "launch.py")


def test_a_failing_rule_is_one_error_at_its_definition_and_the_other_findings_count(tmp_path):
    root = _project(tmp_path)
    run = _lint(root, "--no-cache")
    assert run.code == 2, run.err
    doc = json.loads(run.out)
    found = sorted((f["rule"], f["path"], f["line"]) for f in doc["findings"])
    # the same rule's finding in the file's other function, and the other rule's
    assert found == [("IC003", "pkg/drafter.py", 17), ("IC004", "pkg/drafter.py", 7)]
    assert doc["errors"] == [{
        "path": "pkg/drafter.py",
        "line": 11,
        "column": 1,
        "rule": "IC004",
        "message": "internal error in IC004 (stale-derived-metadata) checking `bad_step`: TypeError: injected fault",
    }]
    assert "Traceback" not in run.err and "Traceback" not in run.out


def test_the_text_report_names_rule_file_and_line_on_stderr(tmp_path):
    root = _project(tmp_path)
    env = clean_env()
    run = run_cli("lint", "--no-cache", "--no-show-source", "pkg", cwd=root, env=env, launcher=root / "launch.py")
    assert run.code == 2
    assert "pkg/drafter.py:7:9: IC004" in run.out and "pkg/drafter.py:17:7: IC003" in run.out
    assert (
        "pkg/drafter.py:11:1: error: internal error in IC004 (stale-derived-metadata) checking `bad_step`: "
        "TypeError: injected fault\n"
    ) in run.err
    assert "Traceback" not in run.err


def test_debug_prints_the_rules_traceback_and_the_failure_is_not_cached(tmp_path):
    root = _project(tmp_path)
    cache = tmp_path / "cache"
    first = _lint(root, "--cache-dir", str(cache))
    assert first.code == 2 and "Traceback" not in first.err
    # a second run with the cache on tries the rule again: the error, now with its traceback
    second = _lint(root, "--cache-dir", str(cache), debug=True)
    assert second.code == 2
    assert json.loads(second.out)["errors"] == json.loads(first.out)["errors"]
    assert "Traceback (most recent call last)" in second.err
    assert "in faulty" in second.err and "TypeError: injected fault" in second.err
    assert "pkg/drafter.py:11:1: internal error in IC004" in second.err
    # the other rule's findings and IC004's other finding come back as before
    assert json.loads(second.out)["findings"] == json.loads(first.out)["findings"]


def test_per_file_ignores_of_the_failing_rule_lets_the_run_pass_on_that_file(tmp_path):
    root = _project(tmp_path, """
        [tool.invariant-check.per-file-ignores]
        "pkg/drafter.py" = ["IC004"]
    """)
    run = _lint(root, "--no-cache")
    assert run.code == 1, run.err
    doc = json.loads(run.out)
    assert doc["errors"] == []
    assert [(f["rule"], f["line"]) for f in doc["findings"]] == [("IC003", 17)]


def test_the_injected_fault_is_all_that_fails(tmp_path):
    # without the fault the same project lints cleanly: both IC004 findings, no error
    root = _project(tmp_path)
    run = run_cli("lint", "--no-cache", "--format", "json", "pkg", cwd=root, env=clean_env())
    assert run.code == 1, run.err
    doc = json.loads(run.out)
    assert doc["errors"] == []
    assert sorted((f["rule"], f["line"]) for f in doc["findings"]) == [("IC003", 17), ("IC004", 7), ("IC004", 13)]


def test_sarif_names_the_failing_rule_and_the_definitions_line(tmp_path):
    import jsonschema

    root = _project(tmp_path)
    run = run_cli("lint", "--no-cache", "--format", "sarif", "pkg", cwd=root, env=clean_env(), launcher=root / "launch.py")
    assert run.code == 2, run.err
    doc = json.loads(run.out)
    schema = json.loads((Path(__file__).parent / "sarif" / "sarif-schema-2.1.0.json").read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(doc)
    (invocation,) = doc["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["associatedRule"] == {"id": "IC004"}
    assert note["locations"][0]["physicalLocation"]["region"] == {"startLine": 11, "startColumn": 1}
    assert sorted(r["ruleId"] for r in doc["runs"][0]["results"]) == ["IC003", "IC004"]
