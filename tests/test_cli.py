"""The `invariant-check` command end to end, in subprocesses: exit codes, options, formats."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ic_support import (
    BAD_CLASS,
    EXPECTED_FLAGGED,
    GOOD_CLASS,
    RULE,
    assert_no_traceback,
    clean_env,
    run_cli,
    write_tree,
)

from invariant_check.cli import commands as cli_module
from invariant_check.lint.engine import PARALLEL_MIN_FILES
from invariant_check.api.registry import all_rules

FINDING_LINE = re.compile(r"^(?P<path>[^:\s][^:]*):(?P<line>\d+):(?P<col>\d+): (?P<rule>IC\d{3}) (?P<msg>.+)$")


def lint(tmp: Path, *args: str, **kw):
    run = run_cli("lint", "--select", RULE, *args, cwd=tmp, **kw)
    assert_no_traceback(run)
    return run


def lint_json(tmp: Path, *args: str, **kw) -> dict:
    run = lint(tmp, "--format", "json", *args, **kw)
    assert run.code in (0, 1, 2), run.err
    return json.loads(run.out)


def flagged(doc: dict) -> set[str]:
    return {f["path"] for f in doc["findings"]}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path)


# -- exit codes ------------------------------------------------------------------------------


def test_exit_0_when_clean(tmp_path):
    (tmp_path / "ok.py").write_text(GOOD_CLASS)
    run = lint(tmp_path, ".")
    assert run.code == 0, run.out + run.err
    assert "All checks passed" in run.out


def test_exit_1_with_findings(tmp_path):
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    run = lint(tmp_path, ".")
    assert run.code == 1, run.out + run.err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["lint", "--select", "IC999", "."], "IC999"),
        (["lint", "--ignore", "NOPE", "."], "NOPE"),
        (["lint", "nothere.py"], "nothere.py"),
        (["lint", "--format", "xml", "."], "xml"),
        (["lint", "--jobs", "0", "."], "--jobs"),
    ],
)
def test_exit_2_usage_errors(tmp_path, args, needle):
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    run = run_cli(*args, cwd=tmp_path)
    assert_no_traceback(run)
    assert run.code == 2, run.out + run.err
    assert needle in run.err


def test_exit_2_unparseable_file_and_others_still_linted(tmp_path):
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    (tmp_path / "broken.py").write_text("def set_skip_topk(:\n")
    run = lint(tmp_path, ".")
    assert run.code == 2
    assert "bad.py:3:7: IC003" in run.out  # the good file was still linted
    assert re.search(r"^broken\.py:1:\d+: error: syntax error", run.err, re.M), run.err


def test_exit_2_nonexistent_path_but_other_paths_linted(tmp_path):
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    doc = lint_json(tmp_path, "bad.py", "missing_dir")
    assert flagged(doc) == {"bad.py"}
    assert [e["path"] for e in doc["errors"]] == ["missing_dir"]


@pytest.mark.parametrize(
    "table, needles",
    [
        ('bogus-key = 1\nselect = ["IC003"]', ["unknown key", "bogus-key"]),
        ('select = ["IC077"]', ["unknown rule code", "IC077"]),
        ('ignore = ["XX1"]', ["XX1"]),
        ('per-file-ignores = {"a.py" = ["IC078"]}', ["IC078"]),
        ('[tool.invariant-check.options.IC003]\nswitch-methodd = "x"', ["unknown option", "switch-methodd"]),
        ('[tool.invariant-check.options.IC404]\nx = 1', ["IC404"]),
        ('[tool.invariant-check.options.IC003]\nswitch-method = 3', ["switch-method"]),
        ("jobs = true", ["jobs"]),
        ('select = "IC003"', ["select"]),
    ],
)
def test_bad_config_is_one_line_exit_2(tmp_path, table, needles):
    (tmp_path / "pyproject.toml").write_text("[tool.invariant-check]\n" + table + "\n")
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    run = run_cli("lint", ".", cwd=tmp_path)
    assert_no_traceback(run)
    assert run.code == 2
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("invariant-check: error:")
    assert "pyproject.toml" in lines[0]
    for needle in needles:
        assert needle in lines[0]


def test_broken_toml_with_our_table_is_an_error_not_ignored(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.invariant-check\nselect = [\n")
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    run = run_cli("lint", ".", cwd=tmp_path)
    assert_no_traceback(run)
    assert run.code == 2 and "invalid TOML" in run.err


# -- rule selection --------------------------------------------------------------------------


def test_select_and_ignore(tree):
    assert lint(tree, "--ignore", RULE, ".").code == 0
    assert lint(tree, "--select", RULE.lower(), ".").code == 1  # codes are case-insensitive
    by_name = run_cli("lint", "--select", all_rules()[RULE].NAME, "--format", "json", ".", cwd=tree)
    assert {f["rule"] for f in json.loads(by_name.out)["findings"]} == {RULE}
    # comma-separated lists work like repeated options
    assert run_cli("lint", "--select", f"{RULE},{RULE}", "--ignore", f"X,{RULE}", ".", cwd=tree).code == 2
    assert run_cli("lint", "--select", RULE, "--ignore", f"{RULE}", ".", cwd=tree).code == 0


# -- formats ---------------------------------------------------------------------------------


def test_text_format_lines_hint_summary(tree):
    run = lint(tree, ".")
    assert run.code == 1
    lines = run.out.splitlines()
    findings = [FINDING_LINE.match(l) for l in lines if FINDING_LINE.match(l)]
    assert {m["path"] for m in findings} == EXPECTED_FLAGGED
    bad = next(m for m in findings if m["path"] == "pkg/bad.py")
    assert (bad["line"], bad["col"], bad["rule"]) == ("3", "7", RULE)  # 1-based, at the class name
    # every finding is followed by its hint
    for i, l in enumerate(lines):
        if FINDING_LINE.match(l):
            assert lines[i + 1].strip().startswith("hint: ")
    assert lines[-2] == f"Found {len(findings)} findings in {len(findings)} files (18 files checked)."
    assert lines[-1] == f"Run `invariant-check explain {RULE}` for the rule's documentation and fix."
    assert "\x1b[" not in run.out  # no colour when not a terminal
    assert "^" not in run.out  # no caret when not a terminal


def test_paths_relative_to_cwd_or_absolute(tree):
    sub = tree / "pkg"
    run = lint(sub, "bad.py", "../pkg/many/m1.py", str(tree / "pkg" / "many" / "m0.py"))
    paths = {FINDING_LINE.match(l)["path"] for l in run.out.splitlines() if FINDING_LINE.match(l)}
    assert paths == {"bad.py", "many/m1.py", "many/m0.py"}
    outside = lint(sub / "sub", str(tree / "pkg" / "bad.py"))
    paths = {FINDING_LINE.match(l)["path"] for l in outside.out.splitlines() if FINDING_LINE.match(l)}
    assert paths == {(tree / "pkg" / "bad.py").as_posix()}


def test_show_source_flag_puts_a_caret_under_the_name(tmp_path):
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    run = lint(tmp_path, "--show-source", ".")
    lines = run.out.splitlines()
    i = next(i for i, l in enumerate(lines) if FINDING_LINE.match(l))
    assert lines[i + 1] == "    class Predictor(nn.Module):"
    assert lines[i + 2] == "    " + " " * 6 + "^" * len("Predictor")


def _run_in_pty(args: list[str], cwd: Path) -> tuple[int, str]:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "invariant_check.cli.commands", *args],
        cwd=cwd,
        env=clean_env(NO_COLOR="1"),
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    proc.wait(timeout=120)
    return proc.returncode, b"".join(chunks).decode().replace("\r\n", "\n")


def test_caret_only_on_a_terminal(tmp_path):
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    code, out = _run_in_pty(["lint", "--select", RULE, "."], tmp_path)
    assert code == 1
    assert "    class Predictor(nn.Module):\n          ^^^^^^^^^\n" in out
    code, out = _run_in_pty(["lint", "--select", RULE, "--no-show-source", "."], tmp_path)
    assert code == 1 and "^" not in out
    piped = lint(tmp_path, ".")
    assert "^" not in piped.out and "class Predictor" not in piped.out


def test_json_contract(tree):
    (tree / "broken.py").write_text("class A:\n    def set_skip_topk(self:\n")
    doc = lint_json(tree, ".")
    assert set(doc) == {"version", "findings", "errors", "summary"}
    assert doc["version"] == 1
    assert flagged(doc) == EXPECTED_FLAGGED
    for f in doc["findings"]:
        # `data`: machine-readable details, only when the rule has some; `fix`: only where the
        # rule knows the repair
        assert set(f) - {"data", "fix"} == {"path", "line", "column", "end_line", "end_column", "rule", "name", "message", "hint"}
        assert isinstance(f.get("data", {}), dict)
        if "fix" in f:
            assert f["fix"]["applicability"] in ("safe", "unsafe") and f["fix"]["message"] and f["fix"]["edits"]
        assert f["rule"] == RULE and f["name"] == all_rules()[RULE].NAME
        assert f["line"] >= 1 and f["column"] >= 1
        assert (f["end_line"], f["end_column"]) >= (f["line"], f["column"])
        assert f["hint"] and "\n" not in f["message"]
    bad = next(f for f in doc["findings"] if f["path"] == "pkg/bad.py")
    # `class Bad(` : the name spans columns 7..9, end exclusive -> 10
    assert (bad["line"], bad["column"], bad["end_line"], bad["end_column"]) == (3, 7, 3, 10)
    assert len(doc["errors"]) == 1
    err = doc["errors"][0]
    assert err["path"] == "broken.py" and "syntax error" in err["message"]
    assert err["line"] == 2 and err["column"] >= 1
    assert doc["summary"]["findings"] == len(doc["findings"])
    assert doc["summary"]["errors"] == 1


def test_github_format(tree):
    run = lint(tree, "--format", "github", ".")
    assert run.code == 1
    pattern = re.compile(
        r"^::error file=(?P<file>[^,]+),line=(?P<line>\d+),col=(?P<col>\d+)"
        r"(?:,endLine=\d+,endColumn=\d+)?,title=(?P<title>IC\d{3})::(?P<msg>.+)$"
    )
    lines = run.out.splitlines()
    matches = [pattern.match(l) for l in lines]
    assert all(matches), lines
    assert {m["file"] for m in matches} == EXPECTED_FLAGGED
    assert {m["title"] for m in matches} == {RULE}
    assert all("\n" not in m["msg"] for m in matches)


def test_output_file(tree):
    out = tree / "report.json"
    run = lint(tree, "--format", "json", "--output", str(out), ".")
    assert run.code == 1
    assert run.out == ""
    assert flagged(json.loads(out.read_text())) == EXPECTED_FLAGGED
    unwritable = lint(tree, "--output", str(tree / "no" / "such" / "dir.txt"), ".")
    assert unwritable.code == 2 and "cannot write" in unwritable.err


def test_statistics_counts_per_rule(tree):
    run = lint(tree, "--statistics", ".")
    m = re.search(rf"^\s*(\d+)\s+{RULE}\s+{all_rules()[RULE].NAME}$", run.out, re.M)
    assert m, run.out
    assert int(m.group(1)) == len(EXPECTED_FLAGGED)
    assert not re.search(rf"^\s*\d+\s+{RULE}\s", lint(tree, ".").out, re.M)


# -- parallelism, cache -----------------------------------------------------------------------


def test_jobs_1_and_2_give_the_same_findings(tree):
    filler = tree / "filler"
    filler.mkdir()
    for i in range(PARALLEL_MIN_FILES):
        (filler / f"f{i}.py").write_text(f"def f{i}(attn_metadata):\n    return attn_metadata\n")
    one = lint_json(tree, "--no-cache", "--jobs", "1", ".")
    two = lint_json(tree, "--no-cache", "--jobs", "2", ".")
    # enough files for the pool to start
    assert two["summary"]["files_checked"] >= PARALLEL_MIN_FILES
    assert one["findings"] == two["findings"]
    assert flagged(one) == EXPECTED_FLAGGED


def test_no_cache_writes_nothing(tree):
    lint(tree, "--no-cache", ".")
    assert not (tree / ".invariant-check-cache").exists()
    lint(tree, ".")
    assert list((tree / ".invariant-check-cache").glob("*.json"))


def test_cache_dir_option_and_env(tree, tmp_path_factory):
    by_option = tmp_path_factory.mktemp("c1")
    by_env = tmp_path_factory.mktemp("c2")
    a = lint_json(tree, "--cache-dir", str(by_option), ".")
    assert list(by_option.glob("*.json"))
    b = lint_json(tree, ".", env=clean_env(INVARIANT_CHECK_CACHE_DIR=str(by_env)))
    assert list(by_env.glob("*.json"))
    assert not (tree / ".invariant-check-cache").exists()
    assert a["findings"] == b["findings"]
    warm = lint_json(tree, ".", env=clean_env(INVARIANT_CHECK_CACHE_DIR=str(by_env)))
    assert warm["summary"]["files_parsed"] == 0 and warm["findings"] == a["findings"]


def test_unwritable_cache_is_a_warning_not_a_failure(tree):
    blocker = tree / "blocker"
    blocker.write_text("a file where the cache folder should be")
    run = lint(tree, "--cache-dir", str(blocker / "cache"), ".")
    assert run.code == 1
    assert "warning" in run.err and "cache" in run.err


# -- discovery -------------------------------------------------------------------------------


def test_exclude(tree):
    doc = lint_json(tree, "--exclude", "many", "--exclude", "pkg/bad.py", ".")
    assert flagged(doc) == {"pkg/sub/bad_sub.py", "pkg/sub/bad_mid.py"}
    doc = lint_json(tree, "--exclude", "m[0-3].py", ".")
    assert flagged(doc) == EXPECTED_FLAGGED - {f"pkg/many/m{i}.py" for i in range(4)}


def test_config_exclude_and_per_file_ignores(tree):
    (tree / "pyproject.toml").write_text(
        '[tool.invariant-check]\nexclude = ["pkg/many"]\n'
        '[tool.invariant-check.per-file-ignores]\n"pkg/sub/*.py" = ["IC003"]\n'
    )
    assert flagged(lint_json(tree, ".")) == {"pkg/bad.py"}


@pytest.mark.parametrize("folder", [".git", "__pycache__", ".venv", "venv", "build", "my-env", "pkg/.tox"])
def test_default_skips(tmp_path, folder):
    (tmp_path / "ok.py").write_text(GOOD_CLASS)
    target = tmp_path / folder
    target.mkdir(parents=True)
    (target / "bad.py").write_text(BAD_CLASS)
    if folder == "my-env":  # any folder holding pyvenv.cfg is a virtual environment
        (target / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert lint(tmp_path, ".").code == 0
    # a file named on the command line is linted wherever it is
    assert lint(tmp_path, f"{folder}/bad.py").code == 1
    # and so is a skipped folder named explicitly
    assert lint(tmp_path, folder).code == 1


def test_folder_named_like_build_is_only_skipped_by_name(tmp_path):
    (tmp_path / "builder").mkdir()
    (tmp_path / "builder" / "bad.py").write_text(BAD_CLASS)
    assert lint(tmp_path, ".").code == 1


# -- configuration discovery ---------------------------------------------------------------------


def test_nearest_pyproject_with_the_table_wins(tree):
    (tree / "pyproject.toml").write_text('[tool.invariant-check]\nignore = ["IC003"]\n')
    # a nearer pyproject.toml without our table is passed over
    (tree / "pkg" / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert run_cli("lint", "pkg", cwd=tree).code == 0
    assert run_cli("lint", ".", cwd=tree / "pkg" / "many").code == 0
    # a nearer one with the table is used instead
    (tree / "pkg" / "many" / "pyproject.toml").write_text('[tool.invariant-check]\nselect = ["IC003"]\n')
    assert run_cli("lint", ".", cwd=tree / "pkg" / "many").code == 1
    assert run_cli("lint", "pkg/many", cwd=tree).code == 1
    # --config overrides the search
    assert run_cli("lint", "--config", str(tree / "pyproject.toml"), "pkg/many", cwd=tree).code == 0


def test_option_from_config_changes_findings(tmp_path):
    (tmp_path / "a.py").write_text(
        "import torch.nn as nn\n\nclass P(nn.Module):\n    def use_shared(self, on):\n        self.on = on\n"
    )
    assert lint(tmp_path, ".").code == 0
    (tmp_path / "pyproject.toml").write_text(
        '[tool.invariant-check.options.IC003]\nswitch-method = "use_shared"\n'
    )
    assert lint(tmp_path, ".").code == 1


# -- rules and explain ------------------------------------------------------------------------


def test_rules_lists_every_rule(tmp_path):
    run = run_cli("rules", cwd=tmp_path)
    assert run.code == 0
    lines = run.out.splitlines()
    assert len(lines) == len(all_rules())
    for line, (code, rule) in zip(lines, all_rules().items()):
        assert line.startswith(code) and rule.NAME in line and line.rstrip().endswith(rule.SUMMARY)
    as_json = json.loads(run_cli("rules", "--format", "json", cwd=tmp_path).out)
    assert [r["code"] for r in as_json] == list(all_rules())


def test_explain(tmp_path):
    rule = all_rules()[RULE]
    run = run_cli("explain", RULE, cwd=tmp_path)
    assert run.code == 0
    assert run.out.startswith(f"# {RULE} {rule.NAME}")
    assert "## What it does" in run.out and "```python" in run.out
    # the tested examples are behind --examples
    first = rule.INVALID[0].code.strip().splitlines()[0]
    assert f"explain {RULE} --examples" in run.out
    assert first in run_cli("explain", RULE, "--examples", cwd=tmp_path).out
    assert run_cli("explain", rule.NAME, cwd=tmp_path).out == run.out
    bad = run_cli("explain", "IC999", cwd=tmp_path)
    assert bad.code == 2 and "IC999" in bad.err
    assert_no_traceback(bad)


# -- never a traceback ---------------------------------------------------------------------------


def test_internal_error_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("INVARIANT_CHECK_DEBUG", raising=False)

    def explode(self, files):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr("invariant_check.lint.engine.Engine.lint", explode)
    result = CliRunner().invoke(cli_module.main, ["lint", "--no-cache", "."])
    assert result.exit_code == 2
    assert result.stderr == "invariant-check: error: internal error: RuntimeError: boom second line\n"
    assert isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("args", [["rules"], ["explain", "IC003"], ["lint", "--no-cache", "."]])
def test_broken_rule_package_is_one_line_everywhere(tmp_path, monkeypatch, args):
    # e.g. a rule module that fails to import: every command says so in one line, exit 2
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("INVARIANT_CHECK_DEBUG", raising=False)

    def broken():
        raise ImportError("cannot import name 'x' from 'invariant_check.rules.ic999'")

    monkeypatch.setattr("invariant_check.api.registry.all_rules", broken)
    result = CliRunner().invoke(cli_module.main, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("invariant-check: error: internal error: ImportError: cannot import name")
    assert result.stderr.count("\n") == 1


def test_interrupt_is_exit_2_not_findings(tmp_path, monkeypatch):
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    monkeypatch.chdir(tmp_path)

    def interrupted(self, files):
        raise KeyboardInterrupt

    monkeypatch.setattr("invariant_check.lint.engine.Engine.lint", interrupted)
    result = CliRunner().invoke(cli_module.main, ["lint", "--no-cache", "."])
    assert result.exit_code == 2
    assert result.stderr == "invariant-check: error: interrupted\n"


def test_debug_env_shows_the_real_exception(tmp_path, monkeypatch):
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INVARIANT_CHECK_DEBUG", "1")

    def explode(self, files):
        raise RuntimeError("boom")

    monkeypatch.setattr("invariant_check.lint.engine.Engine.lint", explode)
    result = CliRunner().invoke(cli_module.main, ["lint", "--no-cache", "."])
    assert isinstance(result.exception, RuntimeError)


def test_output_file_is_utf8_whatever_the_locale(tmp_path):
    (tmp_path / "cjk.py").write_text(BAD_CLASS.replace("Predictor", "\u4e2d\u6587"), encoding="utf-8")
    env = clean_env(LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    run = lint(tmp_path, "--output", "report.txt", "--no-cache", "cjk.py", env=env)
    assert run.code == 1, run.err
    assert "`\u4e2d\u6587`" in (tmp_path / "report.txt").read_text(encoding="utf-8")


def test_explain_a_prefix_names_the_candidates(tmp_path):
    if len(all_rules()) < 2:
        pytest.skip("needs two rules sharing a prefix")
    run = run_cli("explain", "IC", cwd=tmp_path)
    assert run.code == 2 and "several rules" in run.err
    for code in all_rules():
        assert code in run.err


def test_errors_are_sorted_by_path(tmp_path):
    (tmp_path / "b_broken.py").write_text("def set_skip_topk(:\n")
    doc = lint_json(tmp_path, "a_missing.py", "b_broken.py", "c_missing.py")
    assert [e["path"] for e in doc["errors"]] == ["a_missing.py", "b_broken.py", "c_missing.py"]


# -- conventions a ruff user expects ----------------------------------------------------------------


def test_exit_zero_keeps_the_report_but_exits_0(tmp_path):
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    run = lint(tmp_path, "--exit-zero", ".")
    assert run.code == 0 and "bad.py:3:7: IC003" in run.out
    # the tool failing is still exit 2
    (tmp_path / "broken.py").write_text("def set_skip_topk(:\n")
    assert lint(tmp_path, "--exit-zero", ".").code == 2


def test_quiet_prints_findings_only(tmp_path):
    (tmp_path / "bad.py").write_text(BAD_CLASS)
    run = lint(tmp_path, "-q", ".")
    assert run.code == 1
    assert run.out.splitlines()[0].startswith("bad.py:3:7: IC003")
    assert "Found" not in run.out and "explain" not in run.out
    (tmp_path / "bad.py").write_text(GOOD_CLASS)
    clean = lint(tmp_path, "--quiet", ".")
    assert clean.code == 0 and clean.out == ""


def test_output_format_is_an_alias_of_format(tree):
    a = run_cli("lint", "--select", RULE, "--output-format", "json", "--no-cache", ".", cwd=tree)
    b = run_cli("lint", "--select", RULE, "--format", "json", "--no-cache", ".", cwd=tree)
    assert a.code == b.code == 1 and json.loads(a.out) == json.loads(b.out)
    bad = run_cli("lint", "--output-format", "xml", ".", cwd=tree)
    assert bad.code == 2 and "xml" in bad.err


def test_extend_select_adds_to_the_selection(tmp_path):
    (tmp_path / "bad.py").write_text(BAD_CLASS + "x = 1  # invariant-check: ignore[IC003]\n")
    rules = lambda *args: {f["rule"] for f in lint_json(tmp_path, "--no-cache", *args, ".")["findings"]}
    assert rules() == {RULE}
    assert rules("--extend-select", "IC900") == {RULE, "IC900"}
    # and to the configuration's selection
    (tmp_path / "pyproject.toml").write_text('[tool.invariant-check]\nselect = ["IC001"]\n')
    run = run_cli("lint", "--format", "json", "--no-cache", "--extend-select", RULE, ".", cwd=tmp_path)
    assert {f["rule"] for f in json.loads(run.out)["findings"]} == {RULE}
    assert run_cli("lint", "--extend-select", "IC0O3", ".", cwd=tmp_path).code == 2


def test_a_missing_path_is_not_a_file_checked(tmp_path):
    run = lint(tmp_path, "nothere.py")
    assert run.code == 2
    assert run.out.splitlines()[-1] == "1 path not found (0 files checked)."
    assert "nothere.py: error: cannot open: no such file or directory" in run.err
    (tmp_path / "ok.py").write_text(GOOD_CLASS)
    assert lint(tmp_path, "ok.py", "gone").out.splitlines()[-1] == "1 path not found (1 file checked)."
    assert lint_json(tmp_path, "ok.py", "gone")["summary"]["files_checked"] == 1


# -- standard input ----------------------------------------------------------------------------------


def test_stdin_is_linted_as_the_named_file(tree):
    # the buffer differs from the file on disk: the buffer is what is reported
    buffer = (tree / "pkg" / "bad.py").read_text().replace("class Bad(", "\n\nclass Bad(")
    run = run_cli("lint", "--select", RULE, "--format", "json", "-", "--stdin-filename", "pkg/bad.py", cwd=tree, input=buffer)
    assert run.code == 1, run.err
    doc = json.loads(run.out)
    assert [(f["path"], f["line"]) for f in doc["findings"]] == [("pkg/bad.py", 5)]
    assert doc["summary"]["files_checked"] == 1


def test_stdin_uses_the_project_for_cross_file_facts(tree):
    # BadSub's base lives in another file: without the project on disk, IC003 proves nothing
    code = (tree / "pkg" / "sub" / "bad_sub.py").read_text()
    named = run_cli("lint", "--select", RULE, "--format", "json", "--stdin-filename", "pkg/sub/bad_sub.py", cwd=tree, input=code)
    assert [f["path"] for f in json.loads(named.out)["findings"]] == ["pkg/sub/bad_sub.py"]
    # the fixed buffer is clean although the file on disk is not
    fixed = code + "\n    def compact_topk_indices(self, slot_ids):\n        self.buf[: slot_ids.numel()] = self.buf[slot_ids]\n"
    clean = run_cli("lint", "--select", RULE, "-", "--stdin-filename", "pkg/sub/bad_sub.py", cwd=tree, input=fixed)
    assert clean.code == 0, clean.out
    assert clean.out.strip() == "All checks passed (1 file checked)."


def test_stdin_honours_the_files_configuration_and_suppressions(tree):
    (tree / "pkg" / "pyproject.toml").write_text('[tool.invariant-check]\nignore = ["IC003"]\n')
    code = (tree / "pkg" / "bad.py").read_text()
    assert run_cli("lint", "-", "--stdin-filename", "pkg/bad.py", cwd=tree, input=code).code == 0
    (tree / "pkg" / "pyproject.toml").unlink()
    suppressed = code.replace("(nn.Module):", "(nn.Module):  # invariant-check: ignore[IC003]")
    assert run_cli("lint", "--select", RULE, "-", "--stdin-filename", "pkg/bad.py", cwd=tree, input=suppressed).code == 0


def test_stdin_without_a_name_and_with_a_new_file(tmp_path):
    run = run_cli("lint", "--select", RULE, "-", cwd=tmp_path, input=BAD_CLASS)
    assert run.code == 1 and run.out.startswith("-:3:7: IC003")
    # an unsaved new file: nothing on disk under that name
    new = run_cli("lint", "--select", RULE, "--format", "json", "--stdin-filename", "new/mod.py", cwd=tmp_path, input=BAD_CLASS)
    assert [f["path"] for f in json.loads(new.out)["findings"]] == ["new/mod.py"]
    broken = run_cli("lint", "--select", RULE, "-", "--stdin-filename", "x.py", cwd=tmp_path, input="def set_skip_topk(:\n")
    assert broken.code == 2 and re.search(r"^x\.py:1:\d+: error: syntax error", broken.err, re.M)
    assert_no_traceback(broken)


def test_stdin_writes_nothing_for_the_buffer_to_the_cache(tmp_path):
    (tmp_path / "m.py").write_text(GOOD_CLASS)
    run_cli("lint", "--select", RULE, "-", "--stdin-filename", "m.py", cwd=tmp_path, input=BAD_CLASS)
    # the file on disk is still clean, and the buffer's findings were not cached under its path
    assert lint(tmp_path, "m.py").code == 0
    assert run_cli("lint", "--select", RULE, "-", "--stdin-filename", "m.py", cwd=tmp_path, input=BAD_CLASS).code == 1


@pytest.mark.parametrize(
    "args, needle",
    [
        (["lint", "-", "other.py"], "cannot be combined"),
        (["lint", "--stdin-filename", "x.py", "other.py"], "--stdin-filename"),
    ],
)
def test_stdin_usage_errors(tmp_path, args, needle):
    run = run_cli(*args, cwd=tmp_path, input="")
    assert run.code == 2 and needle in run.err
    assert_no_traceback(run)
