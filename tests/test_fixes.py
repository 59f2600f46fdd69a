"""Fixes: every fix a rule offers on its own flagged examples compiles and removes its finding;
`lint --fix`, `--unsafe-fixes`, `--diff`, `--show-fixes`, standard input; fixes that do not
compile, do not fix, or cut through a token are dropped with a note and never written.

The real releases are checked by bench/fix_corpus.py (CI runs it when the corpus is there) and
bench/fix_runtime_check.py (engine runs); the last test here runs the former on one release.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from ic_corpus import require_tarball
from ic_support import RULE, assert_no_traceback, run_cli

from invariant_check.analysis.source import Source, decode
from invariant_check.cli.commands import main
from invariant_check.api.edits import apply_to_text, render_hint
from invariant_check.fixing.fixes import apply_edits, check_source, moved_line
from invariant_check.api.registry import all_rules
from invariant_check.testing import EXAMPLE_FILE, run_example
from invariant_check.api.types import SAFE, UNSAFE, Edit, Fix, Invalid

REPO = Path(__file__).resolve().parent.parent

BAD = """\
import torch.nn as nn


class Bad(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip
"""

UNUSED = "x = 1  # invariant-check: ignore[IC001]\n"


def _examples():
    for code, rule in all_rules().items():
        if rule.documentation().split("## Fix", 1)[-1].lstrip().startswith("None"):
            continue  # a rule that offers no fix says so (IC901)
        for i, example in enumerate(rule.INVALID):
            yield pytest.param(code, i, id=f"{code}-{i}")


# The INVALID examples (by index in the rule's list) that get no fix, on purpose: each rule's
# "## Fix" section says when none is offered. Every other example of a rule with fixes must get
# one, so a fix that disappears fails, and so does one that appears where none was expected
# (update this table, and the rule's docs, when that is intended).
NO_FIX = {
    # 38: the validating call is a constructor whose value is returned: no statement of its
    # own to move into the loop
    "IC001": {1, 11, 18, 26, 31, 32, 33, 34, 36, 38},
    # 22, 23, 25, 26, 28, 31, 32, 33, 34, 36, 38: no sampled rows in scope, or a helper that
    # compacts on some paths only; 29: the misplaced compaction is the only statement of its
    # `if`; 35: a compaction under its own condition (which one is meant is the author's call)
    # 41: a switch bound to an attribute (reported where it is bound, away from its call);
    # 43: no sampled rows in scope, and the compaction is not a statement of its own; 45, 46:
    # the misplaced compaction is the only statement of its `if`; 47: no sampled rows in scope
    # (the mixin's hook takes `rows`); 48: a switch in `__enter__`, whose rows are its callers';
    # 50, 51: a compaction under its own condition, as 35
    "IC002": {5, 6, 8, 10, 11, 13, 14, 16, 17, 19, 20, 22, 23, 25, 26, 28, 29, 31, 32, 33, 34, 35, 36, 38, 41, 43, 45, 46, 47, 48, 50, 51},
    # 15: the compaction set to `None` over a base's real one: dropping the line or writing
    # one for the subclass is the author's call
    # 19: a compaction override that only logs: writing the gather is the author's call
    "IC003": {8, 10, 11, 12, 15, 19},
    # 20, 23, 24, 26, 28, 29, 30, 31, 32, 34, 35, 46: the derived field is computed (or advanced) by the project's
    # own constructor, factory, `__init__` or helpers: no fix knows how (the fix knows vLLM's
    # fields); 21, 22, 27: a field rebound to another buffer, no amount spelled at the write;
    # 36, 38, 40, 41, 42, 43: a new layout, a length other than `seq_lens` (the fix follows
    # an advance of `seq_lens` only)
    "IC004": {8, 10, 11, 19, 20, 21, 22, 23, 24, 26, 27, 28, 29, 30, 31, 32, 34, 35, 36, 38, 40, 41, 42, 43, 44, 45, 46},
    # 14: the step already builds (one build of several); 18, 19: what is forwarded is a
    # container filled from another name's build; 20: allocated once by its class, with no
    # build to repeat
    "IC005": {0, 1, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 18, 19, 20},
}


def test_the_no_fix_table_names_existing_examples_of_rules_with_fixes():
    fixable = {code for code, _ in (p.values for p in _examples())}
    assert set(NO_FIX) <= fixable
    for code, indices in NO_FIX.items():
        assert max(indices) < len(all_rules()[code].INVALID), code


def _fixed_findings(rule, example, root: Path):
    findings = run_example(rule, example, root)
    return [f for f in findings if f.fix is not None]


# -- the rules' own examples ---------------------------------------------------------------------------


@pytest.mark.parametrize("code, index", list(_examples()))
def test_every_offered_fix_compiles_and_removes_its_finding(code, index, tmp_path):
    rule = all_rules()[code]
    example = rule.INVALID[index]
    findings = run_example(rule, example, tmp_path / "before")
    assert findings, f"{code} example {index} is not reported"
    fixed = [f for f in findings if f.fix is not None]
    if index in NO_FIX.get(code, ()):
        assert not fixed, f"{code} example {index} now gets a fix: take it out of NO_FIX if that is meant"
        return
    assert fixed, f"{code} example {index} lost its fix (or add it to NO_FIX, with the reason in the rule's docs)"
    main_file = tmp_path / "before" / EXAMPLE_FILE
    before = main_file.read_bytes()
    for f in fixed:
        assert f.fix.message and "\n" not in f.fix.message  # one line: it is listed by --show-fixes
        after = apply_edits(before, list(f.fix.edits))
        assert after != before
        assert check_source(after, EXAMPLE_FILE) is None, after.decode()
        # the hint is the fix, rendered: its message, then the lines it adds
        assert f.hint == render_hint(f.fix, Source(EXAMPLE_FILE, decode(before)))
        if len(f.fix.edits) == 1:  # (a move shows as the diff of its region, whichever lines match)
            added = [line.strip() for line in f.fix.edits[0].content.splitlines() if line.strip()]
            # a line too long for the project is shown split as the formatter writes it
            # (linewrap): the same code, whatever the whitespace
            flat = "".join("".join(l[2:].split()) for l in f.hint.splitlines() if l.startswith("+ "))
            assert all("".join(a.split()) in flat for a in added)
        again = run_example(rule, Invalid(after.decode(), line=1, files=example.files, options=example.options), tmp_path / f"after-{f.line}")
        moved = moved_line(f.line, f.column, list(f.fix.edits))
        left = [g for g in again if g.rule == code and g.line == moved]
        if "(not fixed: " in f.fix.message:
            # a partial fix (it says which fields it leaves): those, and only those, are left
            fixed_fields = set(f.data["stale_fields"]) - {g for n in left for g in n.data["stale_fields"]}
            assert left and fixed_fields, after.decode()
            assert all(f"`{d}`" in f.fix.message.split("(not fixed: ")[1] for n in left for d in n.data["stale_fields"]), (f.fix.message, left)
        else:
            assert not left, after.decode()


@pytest.mark.parametrize(
    "code, marker",
    [
        ("IC001", "per_layer_attn_metadata[layer_name] = attn_metadata"),  # vLLM 0.18/0.19 eagle.py
        ("IC002", "def propose(self, token_indices_to_sample):"),  # vLLM 0.24 llm_base_proposer.py
        ("IC003", "class Predictor(nn.Module):"),  # vLLM 0.24 deepseek_mtp.py
        ("IC004", "common_attn_metadata.seq_lens += 1"),  # vLLM 0.13 eagle.py
        ("IC004", "def propose_tree"),  # vLLM 0.13-0.20 tree drafting
        ("IC004", "def extend_all_queries_by_N"),  # vLLM 0.18-0.33 parallel drafting
        ("IC005", "attn_metadata = self.build_draft_attn_metadata(num_tokens)"),
        ("IC900", "# invariant-check: ignore"),
    ],
)
def test_the_vllm_shapes_get_a_fix(code, marker, tmp_path):
    rule = all_rules()[code]
    examples = [ex for ex in rule.INVALID if marker in ex.code]
    assert examples, f"no {code} example holds {marker!r}"
    for i, example in enumerate(examples):
        fixed = _fixed_findings(rule, example, tmp_path / str(i))
        assert fixed, example.code
        expected = SAFE if code == "IC900" else UNSAFE
        assert {f.fix.applicability for f in fixed} == {expected}


def test_ic002_fix_calls_the_sampled_rows_where_the_compaction_gathers_rows_onto_themselves(tmp_path):
    # `compact_topk_indices(self.arange[:n])` moves nothing: the fix is not to move it but to
    # compact the sampled rows after the switch
    rule = all_rules()["IC002"]
    example = Invalid(
        """
def propose(self, token_indices_to_sample, batch_size):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    self.model.model.compact_topk_indices(self.arange[:batch_size])
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
        line=3,
    )
    (finding,) = _fixed_findings(rule, example, tmp_path)
    assert finding.fix.message.startswith("Call `self.model.model.compact_topk_indices(token_indices_to_sample)`")
    inserted = "".join(e.content for e in finding.fix.edits)
    assert "compact_topk_indices(token_indices_to_sample)" in inserted and "arange" not in inserted


def test_every_rule_documents_its_fix():
    for code, rule in all_rules().items():
        doc = rule.documentation()
        assert "## Fix" in doc, code
        section = doc.split("## Fix", 1)[1].split("\n## ", 1)[0]
        assert ("Safe" in section or "Unsafe" in section or "None" in section), (code, section)


# -- edits -------------------------------------------------------------------------------------------------


def test_edits_count_lines_as_python_does_and_keep_the_file_line_ending():
    text = "a = 1\r\nb = 2\rc = 3\n"
    edit = Edit(2, 1, 2, 1, "x = 0\n")
    assert apply_to_text(text, [edit], "\r\n") == "a = 1\r\nx = 0\r\nb = 2\rc = 3\n"
    assert apply_to_text(text, [Edit(3, 1, 3, 2, "d")]) == "a = 1\r\nb = 2\rd = 3\n"


def test_edit_bytes_keep_bom_and_declared_encoding():
    latin = "# -*- coding: latin-1 -*-\nname = 'café'\n".encode("latin-1")
    out = apply_edits(latin, [Edit(3, 1, 3, 1, "x = 'é'\n")])
    assert out == latin + "x = 'é'\n".encode("latin-1")
    bom = b"\xef\xbb\xbfa = 1\r\n"
    assert apply_edits(bom, [Edit(2, 1, 2, 1, "b = 2\n")]) == b"\xef\xbb\xbfa = 1\r\nb = 2\r\n"


# -- the command ---------------------------------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "proj"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode() if isinstance(text, str) else text)
    return root


def test_diff_prints_a_unified_diff_and_writes_nothing(tmp_path):
    root = _tree(tmp_path, {"bad.py": BAD})
    run = run_cli("lint", "--no-cache", "--diff", "--unsafe-fixes", "bad.py", cwd=root)
    assert_no_traceback(run)
    assert run.code == 1, run.err
    assert run.out.startswith("--- a/bad.py\n+++ b/bad.py\n@@ ")
    assert "+    def compact_topk_indices(self, slot_ids) -> None:" in run.out
    assert (root / "bad.py").read_text() == BAD
    # without --unsafe-fixes there is nothing to apply: no diff, exit 0
    run = run_cli("lint", "--no-cache", "--diff", "bad.py", cwd=root)
    assert (run.code, run.out) == (0, ""), run.err


def test_fix_applies_safe_fixes_only_unless_asked_and_is_idempotent(tmp_path):
    root = _tree(tmp_path, {"bad.py": BAD, "unused.py": UNUSED})
    run = run_cli("lint", "--no-cache", "--warn-unused-ignores", "--fix", "--show-fixes", ".", cwd=root)
    assert run.code == 1, run.out + run.err  # the unsafe IC003 fix is left, so is its finding
    assert (root / "unused.py").read_text() == "x = 1\n"
    assert (root / "bad.py").read_text() == BAD
    assert "Fixed 1 finding:" in run.out and "unused.py:1:8: IC900 Remove the unused suppression" in run.out
    assert "bad.py:4:7: IC003" in run.out
    assert "1 fixable with `--fix --unsafe-fixes`" in run.out
    run = run_cli("lint", "--no-cache", "--warn-unused-ignores", "--fix", "--unsafe-fixes", ".", cwd=root)
    assert run.code == 0, run.out + run.err
    fixed = (root / "bad.py").read_text()
    assert "def compact_topk_indices" in fixed and "Fixed 1 finding; none left" in run.out
    compile(fixed, "bad.py", "exec")
    again = run_cli("lint", "--no-cache", "--warn-unused-ignores", "--fix", "--unsafe-fixes", ".", cwd=root)
    assert again.code == 0 and "Fixed" not in again.out
    assert (root / "bad.py").read_text() == fixed


def test_json_and_sarif_carry_the_fix(tmp_path):
    import jsonschema

    root = _tree(tmp_path, {"bad.py": BAD})
    run = run_cli("lint", "--no-cache", "--format", "json", "bad.py", cwd=root)
    (finding,) = json.loads(run.out)["findings"]
    fix = finding["fix"]
    assert fix["applicability"] == "unsafe" and fix["message"].startswith("Add `compact_topk_indices`")
    (edit,) = fix["edits"]
    assert edit["location"] == edit["end_location"] == {"line": 7, "column": 1}
    assert edit["content"].startswith("\n    def compact_topk_indices(")
    run = run_cli("lint", "--no-cache", "--format", "sarif", "bad.py", cwd=root)
    doc = json.loads(run.out)
    schema = json.loads((REPO / "tests" / "sarif" / "sarif-schema-2.1.0.json").read_text())
    jsonschema.validate(doc, schema)
    (result,) = doc["runs"][0]["results"]
    (sarif_fix,) = result["fixes"]
    (change,) = sarif_fix["artifactChanges"]
    assert change["artifactLocation"]["uri"] == "bad.py"
    (rep,) = change["replacements"]
    assert rep["deletedRegion"] == {"startLine": 7, "startColumn": 1, "endLine": 7, "endColumn": 1}
    assert rep["insertedContent"]["text"] == edit["content"]
    assert sarif_fix["properties"]["applicability"] == "unsafe"


def test_stdin_fix_prints_the_fixed_source(tmp_path):
    root = _tree(tmp_path, {"bad.py": BAD})
    run = run_cli("lint", "--no-cache", "--fix", "--unsafe-fixes", "--stdin-filename", "bad.py", "-", cwd=root, input=BAD)
    assert run.code == 0, run.err
    assert run.out.startswith(BAD.rstrip("\n")) and "def compact_topk_indices" in run.out
    compile(run.out, "bad.py", "exec")
    assert (root / "bad.py").read_text() == BAD  # the file on disk is not the buffer
    # nothing to fix: the buffer comes back as it was
    run = run_cli("lint", "--no-cache", "--fix", "-", cwd=root, input="x = 1\n")
    assert (run.code, run.out) == (0, "x = 1\n")


def test_fix_keeps_crlf_line_endings(tmp_path):
    root = _tree(tmp_path, {"bad.py": BAD.replace("\n", "\r\n").encode()})
    run = run_cli("lint", "--no-cache", "--fix", "--unsafe-fixes", "bad.py", cwd=root)
    assert run.code == 0, run.err
    data = (root / "bad.py").read_bytes()
    assert b"def compact_topk_indices" in data and b"\n" not in data.replace(b"\r\n", b"")


def test_overlapping_fixes_wait_for_the_next_pass(tmp_path):
    # two unused directives in one comment: both fixes rewrite that comment, so the second
    # is applied on a second pass, on the text the first one left
    root = _tree(tmp_path, {"two.py": "x = 1  # noqa: IC001  # invariant-check: ignore[IC002]\n"})
    run = run_cli("lint", "--no-cache", "--warn-unused-ignores", "--fix", "--show-fixes", "two.py", cwd=root)
    assert run.code == 0, run.out + run.err
    assert (root / "two.py").read_text() == "x = 1\n"
    assert "Fixed 2 findings:" in run.out


def test_explain_shows_the_fix():
    assert "## Fix" in CliRunner().invoke(main, ["explain", "IC004"]).output  # what the fix does
    res = CliRunner().invoke(main, ["explain", "IC004", "--examples"])  # and its diff on an example
    assert res.exit_code == 0, res.output
    assert "## Fix" in res.output and "## The fix, on the first flagged example that has one" in res.output
    assert "+        common_attn_metadata.max_seq_len += 1" in res.output


# -- fixes that must not be written ------------------------------------------------------------------------


def _bad_fix(monkeypatch, make):
    rule = all_rules()[RULE]
    monkeypatch.setattr(rule, "fix", lambda self, report, view: make(view))


@pytest.mark.parametrize(
    "make, note",
    [
        (lambda view: Fix(UNSAFE, "broken", (Edit(7, 1, 7, 1, "    def (:\n"),)), "would not compile"),
        (lambda view: Fix(UNSAFE, "a comment", (Edit(7, 1, 7, 1, "    # compacted elsewhere\n"),)), "the finding is still reported after it"),
        (lambda view: Fix(UNSAFE, "inside a token", (Edit(6, 15, 6, 15, "_x"),)), "not on a syntax boundary"),
    ],
    ids=["does-not-compile", "does-not-fix", "cuts-a-token"],
)
def test_a_fix_that_fails_is_dropped_with_a_note_and_never_written(make, note, monkeypatch, tmp_path):
    root = _tree(tmp_path, {"bad.py": BAD})
    _bad_fix(monkeypatch, make)
    monkeypatch.chdir(root)
    res = CliRunner().invoke(main, ["lint", "--no-cache", "-j", "1", "--fix", "--unsafe-fixes", "bad.py"])
    assert res.exit_code == 1, res.output
    assert note in res.output and "IC003 fix dropped" in res.output
    assert (root / "bad.py").read_text() == BAD


def test_check_source_wants_code_that_compiles_and_round_trips():
    assert check_source(b"x = 1\n", "x.py") is None
    assert "would not compile" in check_source(b"def (:\n", "x.py")
    assert "would not compile" in check_source(b"return 1\n", "x.py")  # a compiler error, not a parse error


# -- a real release ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_fix_corpus_on_the_release_that_shipped_the_reuse_bug(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "fix_corpus.py"), str(require_tarball("0.24.0")), "--workdir", str(tmp_path), "--diffs", str(tmp_path / "diffs")],
        capture_output=True, text=True, timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RESULT: PASS" in proc.stdout
    diff = (tmp_path / "diffs" / "vllm-0.24.0.diff").read_text()
    # vLLM 0.25.0's fix, as the linter writes it
    assert "+            self.model.model.compact_topk_indices(token_indices_to_sample)" in diff
    assert "+    def compact_topk_indices(self, slot_ids: torch.Tensor) -> None:" in diff
