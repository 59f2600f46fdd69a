"""What a new user hits first, end to end in subprocesses: errors in every output format, hidden
unsafe fixes, nothing to lint, settings that are wrong, a mistyped command, a checkout run as it
is, and a hint that a formatter would write as it shows it."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
from ic_support import BAD_CLASS, assert_no_traceback, clean_env, run_cli

from invariant_check.api.edits import apply_to_text

REPO = Path(__file__).resolve().parents[1]
BROKEN = "import torch\n\ndef set_skip_topk(:\n    pass\n"  # a trigger word, then a syntax error


def _tree(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "bad.py").write_text(BAD_CLASS)
    (root / "broken.py").write_text(BROKEN)
    return root


# -- 1. a file that could not be linted, in every format -------------------------------------


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_a_file_that_cannot_be_linted_is_on_stderr_in_every_format(tmp_path, fmt):
    root = _tree(tmp_path / "t")
    run = run_cli("lint", "--no-cache", "--format", fmt, ".", cwd=root)
    assert_no_traceback(run)
    assert run.code == 2
    assert "broken.py:3:" in run.err and ": error: syntax error" in run.err, run.err
    if fmt == "json":
        (error,) = json.loads(run.out)["errors"]
        assert error["path"] == "broken.py" and error["line"] == 3
    if fmt == "github":
        assert any(l.startswith("::error file=broken.py,line=3,") for l in run.out.splitlines())


def test_sarif_says_which_file_could_not_be_linted_and_validates(tmp_path):
    root = _tree(tmp_path / "t")
    run = run_cli("lint", "--no-cache", "--format", "sarif", "-o", "ic.sarif", ".", cwd=root)
    assert run.code == 2 and "broken.py:3:" in run.err  # the CI log says why it failed
    doc = json.loads((root / "ic.sarif").read_text())
    schema = json.loads((REPO / "tests" / "sarif" / "sarif-schema-2.1.0.json").read_text())
    assert not list(jsonschema.Draft7Validator(schema).iter_errors(doc))
    (invocation,) = doc["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and "syntax error" in note["message"]["text"]
    where = note["locations"][0]["physicalLocation"]
    assert where["artifactLocation"]["uri"] == "broken.py" and where["region"]["startLine"] == 3
    assert [r["ruleId"] for r in doc["runs"][0]["results"]] == ["IC003"]  # the other file was linted


# -- 2. fixes hidden for want of --unsafe-fixes ----------------------------------------------

# (the DCP lengths recomputed by a helper: a field no fix can compute)
ONE_LINE_REPLACE = textwrap.dedent("""\
    from vllm.v1.attention.backends.utils import CommonAttentionMetadata

    from .dcp import local_lengths


    def extend_all_queries_by_N(common_attn_metadata: CommonAttentionMetadata, N):
        cad = common_attn_metadata
        new_cad = cad.replace(seq_lens=cad.seq_lens + N, max_seq_len=cad.max_seq_len + N, dcp_local_seq_lens=local_lengths(cad, N))
        return new_cad
""")


@pytest.mark.parametrize("flag", ["--diff", "--fix"])
def test_fixes_that_need_unsafe_fixes_are_counted(tmp_path, flag):
    (tmp_path / "m.py").write_text(ONE_LINE_REPLACE)
    args = ["lint", "--no-cache", flag, *(["--format", "json"] if flag == "--fix" else []), "."]
    run = run_cli(*args, cwd=tmp_path)
    assert_no_traceback(run)
    assert "1 fix available with `--unsafe-fixes`" in run.err, run.err
    assert (tmp_path / "m.py").read_text() == ONE_LINE_REPLACE  # nothing applied
    if flag == "--diff":
        assert run.code == 0 and run.out == ""
    shown = run_cli(*args[:-1], "--unsafe-fixes", ".", cwd=tmp_path)
    assert "available with `--unsafe-fixes`" not in shown.err


# -- 4. the linter's own environment variables -----------------------------------------------


def test_a_bad_debug_value_is_an_error_not_ignored(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    run = run_cli("lint", ".", cwd=tmp_path, env=clean_env(INVARIANT_CHECK_DEBUG="maybe"))
    assert run.code == 2 and run.out == ""
    (line,) = run.err.splitlines()
    assert "INVARIANT_CHECK_DEBUG='maybe'" in line and "accepted values" in line
    assert run_cli("lint", ".", cwd=tmp_path, env=clean_env(INVARIANT_CHECK_DEBUG="off")).code == 0


# -- 5. nothing to lint ----------------------------------------------------------------------


def test_no_python_file_is_said_so(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    run = run_cli("lint", "empty", cwd=tmp_path)
    assert run.code == 0
    assert run.out == "No Python file found (0 files checked).\n"
    assert "warning: no Python file found in empty" in run.err
    assert "All checks passed" not in run.out
    # --quiet: not a word
    assert run_cli("lint", "-q", "empty", cwd=tmp_path).err == ""


# -- 6, 7. configuration the user got wrong --------------------------------------------------


def test_extra_paths_naming_a_missing_folder_is_a_warning(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.invariant-check]\nextra-paths = ["stubs", "a.py"]\n')
    (tmp_path / "a.py").write_text("x = 1\n")
    run = run_cli("lint", ".", cwd=tmp_path)
    assert run.code == 0
    warnings = [l for l in run.err.splitlines() if "extra-paths" in l]
    assert len(warnings) == 2
    assert "'stubs' does not exist" in warnings[0] and "'a.py' is not a folder" in warnings[1]
    (tmp_path / "stubs").mkdir()
    assert "'stubs'" not in run_cli("lint", ".", cwd=tmp_path).err


def test_a_tool_table_in_another_file_says_the_keys_stand_at_the_top(tmp_path):
    (tmp_path / "x.toml").write_text('[tool.invariant-check]\nselect = ["IC001"]\n')
    (tmp_path / "a.py").write_text("x = 1\n")
    run = run_cli("lint", "--config", "x.toml", ".", cwd=tmp_path)
    assert run.code == 2
    (line,) = run.err.splitlines()
    assert "x.toml" in line and "pyproject.toml" in line and "top level" in line
    assert "unknown key" not in line
    (tmp_path / "x.toml").write_text('select = ["IC001"]\n')
    assert run_cli("lint", "--config", "x.toml", ".", cwd=tmp_path).code == 0


# -- 8. an interpreter that is not one -------------------------------------------------------


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_an_interpreter_that_fails_gets_its_first_words_in_one_line(tmp_path):
    # what pyenv's shim prints for a version that is not installed: several lines, indented
    shim = _script(tmp_path / "python2", 'echo "pyenv: python2: command not found" >&2\necho >&2\n'
                   'echo "The \\`python2\' command exists in these Python versions:" >&2\necho "  2.7.18" >&2\nexit 127\n')
    (tmp_path / "a.py").write_text("x = 1\n")
    run = run_cli("lint", "--python", shim, ".", cwd=tmp_path)
    assert run.code == 2
    (line,) = run.err.splitlines()
    assert line.endswith("not a working Python interpreter (exit status 127: pyenv: python2: command not found)"), line


def test_a_python_2_interpreter_is_refused_by_its_version(tmp_path):
    answer = '{"path": ["/usr/lib/python2.7"], "stdlib": ["/usr/lib/python2.7", null], "version": "2.7.18", "executable": "/usr/bin/python2"}'
    old = _script(tmp_path / "python2", f"echo '{answer}'\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    run = run_cli("lint", "--python", old, ".", cwd=tmp_path)
    assert run.code == 2
    assert "Python 2.7.18: imports are read from a Python 3 environment only" in run.err


# -- 13. a command from another linter -------------------------------------------------------


@pytest.mark.parametrize("typed, meant", [("check", "lint"), ("lnit", "lint"), ("explian", "explain"), ("rule", "rules")])
def test_a_mistyped_command_gets_did_you_mean(tmp_path, typed, meant):
    run = run_cli(typed, ".", cwd=tmp_path)
    assert run.code == 2
    assert f"Error: No such command '{typed}'. Did you mean '{meant}'?" in run.err
    assert "Usage: " in run.err and "--help" in run.err  # click's usage error
    plain = run_cli("zzzz", cwd=tmp_path)
    assert plain.code == 2 and "No such command 'zzzz'." in plain.err and "Did you mean" not in plain.err


# -- 14. a checkout, run as it is ------------------------------------------------------------


def test_python_m_invariant_check_is_the_command(tmp_path):
    run = subprocess.run([sys.executable, "-m", "invariant_check", "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.strip() == "invariant-check, version 0.1.0"


def test_a_copy_of_the_checkout_runs_from_its_root_without_an_install(tmp_path):
    """A copy nothing installed: `python -m invariant_check` in its root imports the copy, with
    the rules from its top-level `rules/` folder."""
    copy = tmp_path / "checkout"
    for name in ("invariant_check", "rules", "runtime_guards", "examples"):
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    where = subprocess.run(
        [sys.executable, "-c", "import invariant_check.rules as r, invariant_check.runtime_guards.plugin as p; print(r.__file__); print(p.__file__)"],
        capture_output=True, text=True, cwd=copy,
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [str(copy / "rules" / "__init__.py"), str(copy / "runtime_guards" / "plugin.py")]
    run = subprocess.run([sys.executable, "-m", "invariant_check", "lint", "--no-cache", "--format", "json", "examples"],
                         capture_output=True, text=True, cwd=copy, env=clean_env())
    assert run.returncode == 1, run.stderr
    assert {f["rule"] for f in json.loads(run.stdout)["findings"]} == {"IC001", "IC002", "IC003", "IC004", "IC005", "IC006"}


def test_the_editable_install_registers_the_guard_plugin():
    """docs/guards.md: `pip install -e .` registers the entry point vLLM loads (this
    environment has the project installed in editable mode)."""
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "invariant_check_guards"]
    assert ep.value == "invariant_check.runtime_guards.plugin:register"
    assert callable(ep.load())


# -- 10. a hint as the formatter writes it ---------------------------------------------------


def _ruff_format(source: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "ruff", "format", "--stdin-filename", "m.py", "-"],
                          input=source, capture_output=True, text=True, cwd=cwd)
    assert done.returncode == 0, f"ruff (the `test` extra) is needed: {done.stderr}"
    return done.stdout


def _added(hint: str) -> list[str]:
    return [l[2:] for l in hint.splitlines()[1:] if l.startswith("+ ")]


@pytest.mark.parametrize("config", [None, 100, 120])
def test_the_hint_of_a_one_line_replace_is_wrapped_as_ruff_format_writes_it(tmp_path, config):
    root = tmp_path / "p"
    root.mkdir()
    (root / "m.py").write_text(ONE_LINE_REPLACE)
    if config is not None:
        (root / "pyproject.toml").write_text(f"[tool.ruff]\nline-length = {config}\n")
    run = run_cli("lint", "--no-cache", "--select", "IC004", "--format", "json", ".", cwd=root)
    (finding,) = json.loads(run.out)["findings"]
    added = _added(finding["hint"])
    limit = config or 88
    # the same code as the fix writes, laid out as ruff formats the fixed file
    fixed = apply_to_text(ONE_LINE_REPLACE, [_edit(e) for e in finding["fix"]["edits"]])
    formatted = _ruff_format(fixed, root).splitlines()
    start = next(i for i, l in enumerate(formatted) if l.lstrip().startswith("new_cad = "))
    end = next(i for i in range(start, len(formatted)) if formatted[i].lstrip().startswith("return"))
    statement = formatted[start:end]
    indent = len(statement[0]) - len(statement[0].lstrip())
    assert added == [l[indent:] for l in statement]
    assert len(added) > 1 and all(len(l) + indent <= limit for l in added)


def _edit(e: dict):
    from invariant_check.api.types import Edit

    return Edit(e["location"]["line"], e["location"]["column"], e["end_location"]["line"], e["end_location"]["column"], e["content"])


def test_only_whole_one_line_statements_are_split():
    """A long line of a docstring, or of a statement that already spans lines, is shown as it
    is; a long one-line statement is split (and comes back the same code)."""
    import ast

    from invariant_check.api.linewrap import wrap_statements

    call = "    result = compute(" + ", ".join(f"argument_number_{i}" for i in range(8)) + ")"
    lines = [
        "def f():",
        '    """A docstring line that is long enough to pass the limit: compute(a, b, c, d, e, f, g, h, i).',
        '    """',
        call,
        "    other = compute(",
        "        " + ", ".join(f"argument_number_{i}" for i in range(9)),
        "    )",
    ]
    shown = wrap_statements(lines, 88)
    assert shown[1] == [lines[1]] and shown[5] == [lines[5]]
    assert len(shown[3]) == 10 and all(len(l) <= 88 for l in shown[3])
    assert ast.dump(ast.parse("\n".join(shown[3]).strip())) == ast.dump(ast.parse(call.strip()))
