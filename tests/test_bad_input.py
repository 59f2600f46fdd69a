"""Bad input: each file gets one error line or is linted normally; never a traceback, never a
stop for the other files. Ends with a property test over generated and mutated sources.

A file is only read for errors where it can matter: the prefilter skips files (and the
definitions of a file) that hold nothing an enabled rule needs, without parsing them (by
design). So every bad input here sits in a top-level definition that holds `set_skip_topk`,
and one test shows the same broken file without it is skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ic_support import BAD_CLASS, RULE, TREE, assert_no_traceback, run_cli

from invariant_check.cli import commands as cli_module
from invariant_check.lint.analyze import Plan, lint_bytes
from invariant_check.lint.engine import PARALLEL_MIN_FILES, Engine
from invariant_check.lint.records import Outcome
from invariant_check.api.registry import all_rules
from invariant_check.api.types import FileError

TRIGGER = "set_skip_topk"
ERROR_LINE = re.compile(r"^(?P<path>[^:]+)(?::(?P<line>\d+):(?P<col>\d+))?: error: (?P<msg>.+)$")


def lint_json(cwd: Path, *args: str, **kw):
    run = run_cli("lint", "--select", RULE, "--format", "json", "--no-cache", *args, cwd=cwd, **kw)
    assert_no_traceback(run)
    return run, json.loads(run.out)


def errors_by_path(doc: dict) -> dict[str, dict]:
    return {e["path"]: e for e in doc["errors"]}


# Each holds a module-level `def set_skip_topk` and, in the same top-level chunk (module code
# after it), the bad input: IC003 reads that chunk, so the bad input is met.
TRIGGER_DEF = f"def {TRIGGER}(): pass"
BAD_FILES: dict[str, bytes] = {
    "syntax.py": f"{TRIGGER_DEF}\nf = g(:\n    pass\n".encode(),
    "py2.py": f'print "{TRIGGER}"\n{TRIGGER_DEF}\n'.encode(),
    "non_utf8.py": f"def {TRIGGER}(): return '\xff\xfe'\n".encode("latin-1"),
    "bad_cookie.py": f"# -*- coding: no-such-codec -*-\n{TRIGGER_DEF}\n".encode(),
    "nul.py": f"{TRIGGER_DEF}\x00\n".encode(),
    "deep.py": (f"{TRIGGER_DEF}\ny = " + "(" * 3000 + "1" + ")" * 3000 + "\n").encode(),
    "deep_lambda.py": (f"{TRIGGER_DEF}\ny = " + "lambda: " * 6000 + "1\n").encode(),
    "deep_indent.py": (
        f"{TRIGGER_DEF}\nx = 1\n" + "".join(" " * i + "if x:\n" for i in range(150)) + " " * 150 + "pass\n"
    ).encode(),
}
# Linted normally: these produce the IC003 finding at the class name.
NORMAL_FILES: dict[str, bytes] = {
    "bom.py": b"\xef\xbb\xbf" + BAD_CLASS.encode(),
    "crlf.py": BAD_CLASS.replace("\n", "\r\n").encode(),
    "latin1.py": b"# -*- coding: latin-1 -*-\n" + BAD_CLASS.replace("skip):", "skip):  # caf\xe9").encode("latin-1"),
    "no_final_newline.py": BAD_CLASS.rstrip("\n").encode(),
    "tabs.py": BAD_CLASS.replace("    ", "\t").encode(),
}


def test_each_bad_file_one_error_and_the_rest_linted(tmp_path):
    for name, data in {**BAD_FILES, **NORMAL_FILES}.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "empty.py").write_bytes(b"")
    (tmp_path / "x.py").mkdir()  # a directory with a .py name: walked like any folder
    (tmp_path / "x.py" / "inner.py").write_text(BAD_CLASS)
    os.symlink("loop_b.py", tmp_path / "loop_a.py")
    os.symlink("loop_a.py", tmp_path / "loop_b.py")
    os.symlink("missing_target.py", tmp_path / "dangling.py")
    run, doc = lint_json(tmp_path, ".")
    assert run.code == 2
    errors = errors_by_path(doc)
    assert set(errors) == set(BAD_FILES) | {"loop_a.py", "loop_b.py", "dangling.py"}
    for e in errors.values():
        assert "\n" not in e["message"]
    assert {f["path"] for f in doc["findings"]} == set(NORMAL_FILES) | {"x.py/inner.py"}
    for f in doc["findings"]:
        line_of_class = 4 if f["path"] == "latin1.py" else 3
        assert (f["line"], f["column"]) == (line_of_class, 7), f
    # the text format: exactly one stderr line per bad file, each naming it
    text = run_cli("lint", "--select", RULE, "--no-cache", ".", cwd=tmp_path)
    assert_no_traceback(text)
    lines = text.err.splitlines()
    assert sorted(ERROR_LINE.match(l)["path"] for l in lines) == sorted(errors)


def test_syntax_errors_name_line_and_column(tmp_path):
    for name in ("syntax.py", "py2.py"):
        (tmp_path / name).write_bytes(BAD_FILES[name])
    _, doc = lint_json(tmp_path, ".")
    errors = errors_by_path(doc)
    assert (errors["syntax.py"]["line"], errors["syntax.py"]["column"]) == (2, 7)  # at `:`
    assert errors["syntax.py"]["message"].startswith("syntax error")
    assert (errors["py2.py"]["line"], errors["py2.py"]["column"]) == (1, 1)
    assert "print" in errors["py2.py"]["message"]  # CPython's hint for Python 2 prints


def test_too_deep_is_an_error_not_a_crash(tmp_path):
    # libcst's native parser overflows the C stack on these (a segfault): they must be refused
    for name in ("deep.py", "deep_lambda.py", "deep_indent.py"):
        (tmp_path / name).write_bytes(BAD_FILES[name])
    (tmp_path / "ok.py").write_text(BAD_CLASS)
    run, doc = lint_json(tmp_path, ".")
    assert run.code == 2
    assert {e["path"] for e in doc["errors"]} == {"deep.py", "deep_lambda.py", "deep_indent.py"}
    assert all("too deep" in e["message"] for e in doc["errors"])
    assert [f["path"] for f in doc["findings"]] == ["ok.py"]


def test_too_deep_in_worker_processes(tmp_path):
    # the same in the process pool: one dead worker would take every other file with it
    (tmp_path / "deep.py").write_bytes(BAD_FILES["deep.py"])
    for i in range(8):
        (tmp_path / f"ok{i}.py").write_text(BAD_CLASS)
    for i in range(PARALLEL_MIN_FILES):
        (tmp_path / f"filler{i}.py").write_text("x = 1\n")
    run, doc = lint_json(tmp_path, "--jobs", "2", ".")
    assert run.code == 2
    assert [e["path"] for e in doc["errors"]] == ["deep.py"]
    assert len(doc["findings"]) == 8


def test_files_without_triggers_are_not_parsed_by_design(tmp_path):
    (tmp_path / "broken.py").write_text("def f(:\n")
    run, doc = lint_json(tmp_path, ".")
    assert run.code == 0 and doc["errors"] == []
    run, doc = lint_json(tmp_path, "--no-prefilter", ".")
    assert run.code == 2 and [e["path"] for e in doc["errors"]] == ["broken.py"]


def test_directory_named_x_py_given_explicitly(tmp_path):
    (tmp_path / "x.py").mkdir()
    (tmp_path / "x.py" / "inner.py").write_text(BAD_CLASS)
    run, doc = lint_json(tmp_path, "x.py")
    assert run.code == 1 and [f["path"] for f in doc["findings"]] == ["x.py/inner.py"]
    (tmp_path / "empty.py").mkdir()
    run, doc = lint_json(tmp_path, "empty.py")
    assert run.code == 0 and doc["errors"] == []


def test_symlink_loop_given_explicitly(tmp_path):
    os.symlink("b.py", tmp_path / "a.py")
    os.symlink("a.py", tmp_path / "b.py")
    (tmp_path / "ok.py").write_text(BAD_CLASS)
    run, doc = lint_json(tmp_path, "a.py", "ok.py")
    assert run.code == 2
    assert doc["errors"] == [{"path": "a.py", "message": "cannot open: symbolic link loop"}]
    assert [f["path"] for f in doc["findings"]] == ["ok.py"]


def test_symlinked_folder_loop_is_not_followed(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(BAD_CLASS)
    os.symlink("..", tmp_path / "pkg" / "up")  # a folder loop: walking it would never end
    run, doc = lint_json(tmp_path, ".")
    assert run.code == 1 and [f["path"] for f in doc["findings"]] == ["pkg/m.py"]


def test_fifo_named_on_the_command_line(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "ok.py").write_text(BAD_CLASS)
    # reading a FIFO blocks forever: it must be refused, and skipped while walking
    run, doc = lint_json(tmp_path, "pipe.py", "ok.py", timeout=120)
    assert run.code == 2 and [e["path"] for e in doc["errors"]] == ["pipe.py"]
    run, doc = lint_json(tmp_path, ".", timeout=120)
    assert run.code == 1 and doc["errors"] == []


def _drop_read_override() -> list[str] | None:
    """A command prefix that runs the CLI without the power to read a mode-000 file.

    The tests run as root, and root reads anything through CAP_DAC_OVERRIDE: chmod alone
    proves nothing. `setpriv` drops that capability (and CAP_DAC_READ_SEARCH) from the
    bounding set, so the exec'd CLI keeps uid 0 (and can still run the interpreter under
    /root) but is refused the file. Not root: chmod is enough, no prefix needed.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    probe = subprocess.run([*prefix, "true"], capture_output=True)
    return prefix if probe.returncode == 0 else None


def test_unreadable_file(tmp_path):
    prefix = _drop_read_override()
    if prefix is None:
        pytest.skip("running as root without setpriv (or without CAP_SETPCAP): cannot make a file unreadable")
    secret = tmp_path / "secret.py"
    secret.write_text(BAD_CLASS)
    secret.chmod(0)
    (tmp_path / "ok.py").write_text(BAD_CLASS)
    try:
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "invariant_check.cli.commands", "lint", "--select", RULE,
             "--format", "json", "--no-cache", "."],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )
    finally:
        secret.chmod(0o644)
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    assert proc.returncode == 2
    assert doc["errors"] == [{"path": "secret.py", "message": "cannot read: Permission denied"}]
    assert [f["path"] for f in doc["findings"]] == ["ok.py"]


def test_nonexistent_paths(tmp_path):
    (tmp_path / "ok.py").write_text(BAD_CLASS)
    run, doc = lint_json(tmp_path, "ok.py", "gone.py", "gone_dir/")
    assert run.code == 2
    assert sorted(e["path"] for e in doc["errors"]) == ["gone.py", "gone_dir"]
    assert all("no such file" in e["message"] for e in doc["errors"])
    assert [f["path"] for f in doc["findings"]] == ["ok.py"]


def _engine(root: Path) -> Engine:
    rules = [all_rules()[RULE]]
    return Engine(rules, {RULE: rules[0].default_options()}, jobs=1, root=root, cwd=root)


def test_file_deleted_while_linting(tmp_path):
    # discovery saw it; it is gone when the engine reads it
    keep = tmp_path / "keep.py"
    keep.write_text(BAD_CLASS)
    gone = tmp_path / "gone.py"
    gone.write_text(BAD_CLASS)
    files = [gone, keep]
    gone.unlink()
    result = _engine(tmp_path).lint(files)
    assert result.errors == [FileError("gone.py", "cannot read: file disappeared while linting")]
    assert [f.path for f in result.findings] == ["keep.py"]


def test_file_deleted_between_scan_and_parse(tmp_path):
    # a warm run takes the digest from the stat memo and reads the file only to analyse it:
    # that read can fail
    import time

    from invariant_check.lint.cache import Cache

    path = tmp_path / "never.py"
    path.write_text(BAD_CLASS)
    old = time.time_ns() - 1000 * 10**9
    os.utime(path, ns=(old, old))
    rules = [all_rules()[RULE]]
    options = {RULE: rules[0].default_options()}
    cache = Cache(tmp_path / "cache", "k")
    Engine(rules, options, jobs=1, cache=cache, root=tmp_path, cwd=tmp_path).lint([path])
    warm = Cache(tmp_path / "cache", "k")
    warm.load()
    warm.results.clear()  # the scan is cached, the analysis is not
    engine = Engine(rules, options, jobs=1, cache=warm, root=tmp_path, cwd=tmp_path)
    real_read = engine._read_for_project

    def read_after_deletion(p):
        path.unlink()
        return real_read(p)

    engine._read_for_project = read_after_deletion
    engine.project = engine._new_project()
    result = engine.lint([path])
    assert result.errors == [FileError("never.py", "cannot read: file disappeared while linting")]
    assert result.findings == []


@pytest.mark.slow  # tens of seconds to a minute or more on 2 cores
def test_fifty_thousand_lines(tmp_path):
    filler = "".join(f"value_{i} = {i} + {i} * 2  # line {i}\n" for i in range(50_000 - 6))
    (tmp_path / "big.py").write_text(filler + BAD_CLASS)
    (tmp_path / "small.py").write_text(BAD_CLASS)
    run, doc = lint_json(tmp_path, ".")
    assert run.code == 1
    assert sorted((f["path"], f["line"]) for f in doc["findings"]) == [("big.py", 50_000 - 6 + 3), ("small.py", 3)]


# -- property test -------------------------------------------------------------------------------


def _seeds() -> list[str]:
    out = [textwrap.dedent(code).lstrip("\n") for code in TREE.values() if code]
    for rule in all_rules().values():
        for ex in [*rule.VALID, *rule.INVALID]:
            out.append(textwrap.dedent(ex.code).lstrip("\n"))
            out.extend(textwrap.dedent(c).lstrip("\n") for c in ex.files.values())
    return out


SEEDS = _seeds()
RULES = list(all_rules().values())
OPTIONS = {r.CODE: r.default_options() for r in RULES}
PLAN = Plan.build(RULES, OPTIONS)
# what the rules look for: inserted into generated sources so that they get analysed
TRIGGERS = [
    "set_skip_topk", "compact_topk_indices", "set_skip_topk(True)", "attn_metadata", "md",
    "FlashAttentionMetadata", "isinstance(", "assert ", "raise ", "for g in groups:\n    ",
    "while x:\n    ", "[-1]", "next(iter(", "seq_lens", "max_seq_len", "self.model(",
]
ODD_TEXT = [
    "\ufeff", "\x00", "\r", "\r\n", "\t", "\x0c", "\\", "\u2028", "\u200f", "e\u0301", "\U0001f600",
    "'''", '"', "#", "# invariant-check: ignore", "# invariant-check: skip-file", "# -*- coding: latin-1 -*-\n",
    "\udcff", "λ", "async ", "await ", "lambda: ", "match x:\n case 1: pass\n", "class ", "def ", ":", "@",
]


@st.composite
def mutated_source(draw) -> bytes:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["insert", "delete", "dup_line", "swap_lines", "nest", "indent", "truncate"]))
        pos = draw(st.integers(0, len(text)))
        if kind == "insert":
            piece = draw(
                st.one_of(
                    st.sampled_from(TRIGGERS),
                    st.sampled_from(ODD_TEXT),
                    st.text(max_size=12),
                )
            )
            text = text[:pos] + piece + text[pos:]
        elif kind == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 20)):]
        elif kind in ("dup_line", "swap_lines", "indent") and text:
            lines = text.splitlines(keepends=True)
            i = draw(st.integers(0, len(lines) - 1))
            j = draw(st.integers(0, len(lines) - 1))
            if kind == "dup_line":
                lines.insert(i, lines[j])
            elif kind == "swap_lines":
                lines[i], lines[j] = lines[j], lines[i]
            else:
                lines[i] = " " * draw(st.integers(1, 9)) + lines[i]
            text = "".join(lines)
        elif kind == "nest":
            depth = draw(st.integers(1, 400))
            opener, closer = draw(st.sampled_from([("(", ")"), ("[", "]"), ("{", "}"), ("not ", ""), ("-", "")]))
            text = text[:pos] + opener * depth + "x" + closer * depth + text[pos:]
        elif kind == "truncate":
            text = text[:pos]
    data = text.encode("utf-8", errors="surrogatepass")
    if draw(st.booleans()):
        raw = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            if raw:
                raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        data = bytes(raw)
    return data


def _check_result(result: Outcome) -> None:
    assert isinstance(result, Outcome)
    for error in result.errors:
        assert error.path == "m.py" and error.message
        assert "\n" not in error.message
        # the rules must cope with anything that parses: a rule error here is a rule bug
        assert "internal error" not in error.message, error.message
    if not result.parsed:
        assert result.candidates == []
    for cand in result.candidates:
        assert cand.finding.line >= 1 and cand.finding.column >= 1


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=mutated_source())
def test_lint_bytes_never_raises(tmp_path_factory, data):
    # hypothesis runs the body many times: one folder per example
    root = tmp_path_factory.mktemp("m")
    _check_result(lint_bytes("m.py", data, PLAN, root=root))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(mutated_source(), min_size=1, max_size=3))
def test_cli_never_raises(sources):
    # in-process (a subprocess per example would take minutes); the CLI is the same code
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i, data in enumerate(sources):
            (root / f"m{i}.py").write_bytes(data)
        result = CliRunner().invoke(
            cli_module.main, ["lint", "--no-cache", "--warn-unused-ignores", "--format", "json", str(root)]
        )
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert result.exit_code in (0, 1, 2)
        assert "Traceback" not in result.output and "internal error" not in result.output
        doc = json.loads(result.stdout)
        assert len(doc["errors"]) <= len(sources)
        assert (result.exit_code == 2) == bool(doc["errors"])


def test_fifo_given_to_the_engine(tmp_path):
    # library callers skip discovery: the engine itself must not block on a FIFO
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "ok.py").write_text(BAD_CLASS)
    result = _engine(tmp_path).lint([tmp_path / "pipe.py", tmp_path / "ok.py"])
    assert result.errors == [FileError("pipe.py", "cannot read: not a regular file")]
    assert [f.path for f in result.findings] == ["ok.py"]


@pytest.mark.parametrize("filler", [PARALLEL_MIN_FILES + 20], ids=["pool"])
def test_no_worker_processes_falls_back_to_serial(tmp_path, monkeypatch, filler):
    # sandboxes without /dev/shm (or a process limit) refuse the pool: lint serially, and say so
    from invariant_check.lint import engine as engine_mod

    for i in range(8):
        (tmp_path / f"m{i}.py").write_text(BAD_CLASS)
    for i in range(filler):
        (tmp_path / f"filler{i}.py").write_text("x = 1\n")
    files = sorted(tmp_path.glob("*.py"))
    rules = [all_rules()[RULE]]
    options = {RULE: rules[0].default_options()}
    serial = Engine(rules, options, jobs=1, root=tmp_path, cwd=tmp_path).lint(files)

    class NoPool:
        def __init__(self, *args, **kwargs):
            raise OSError(38, "Function not implemented")

    monkeypatch.setattr(engine_mod, "ProcessPoolExecutor", NoPool)
    fallback = Engine(rules, options, jobs=2, root=tmp_path, cwd=tmp_path).lint(files)
    assert fallback.findings == serial.findings and len(serial.findings) == 8
    assert fallback.errors == serial.errors == []
    assert any("ran serially" in w for w in fallback.warnings)


def test_unlistable_folder(tmp_path):
    prefix = _drop_read_override()
    if prefix is None:
        pytest.skip("running as root without setpriv (or without CAP_SETPCAP): cannot make a folder unreadable")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "bad.py").write_text(BAD_CLASS)
    locked.chmod(0)
    (tmp_path / "ok.py").write_text(BAD_CLASS)
    try:
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "invariant_check.cli.commands", "lint", "--select", RULE,
             "--format", "json", "--no-cache", "."],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )
    finally:
        locked.chmod(0o755)
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    assert proc.returncode == 2
    assert doc["errors"] == [{"path": "locked", "message": "cannot list: Permission denied"}]
    assert [f["path"] for f in doc["findings"]] == ["ok.py"]


@pytest.mark.parametrize("stage", ["needs", "__init__"])
def test_a_rule_that_cannot_be_set_up_does_not_stop_the_others(tmp_path, stage):
    # A test-only rule (handed to the engine directly, not registered) that raises while the
    # run is planned: it is left out, the error names it, IC003 still reports.
    from invariant_check.api.rule import Rule

    class Broken(Rule):
        CODE = "IC990"
        NAME = "broken"

    def explode(*args, **kwargs):
        raise ValueError("rule bug\nwith two lines")

    setattr(Broken, stage, classmethod(explode) if stage == "needs" else explode)
    (tmp_path / "m.py").write_text(BAD_CLASS)
    ic003 = all_rules()[RULE]
    engine = Engine(
        [Broken, ic003], {"IC990": {}, RULE: ic003.default_options()}, jobs=1, root=tmp_path, cwd=tmp_path
    )
    result = engine.lint([tmp_path / "m.py"])
    assert [(f.path, f.rule) for f in result.findings] == [("m.py", RULE)]
    (error,) = result.errors
    assert error.path == "<rule IC990>"
    assert "ValueError: rule bug with two lines" in error.message and "\n" not in error.message


def test_a_rule_that_raises_in_one_file_does_not_silence_the_others(tmp_path):
    # A test-only rule that raises while visiting: the file gets an error naming it, and the
    # other rules' findings in that same file are still reported.
    from invariant_check.analysis.needs import Words
    from invariant_check.api.rule import Rule

    class Crashing(Rule):
        CODE = "IC992"
        NAME = "crashing"

        @classmethod
        def needs(cls, options):
            return Words("set_skip_topk")

        def check_function(self, view):
            raise KeyError("no such thing")

    (tmp_path / "m.py").write_text(BAD_CLASS)
    ic003 = all_rules()[RULE]
    engine = Engine(
        [Crashing, ic003], {"IC992": {}, RULE: ic003.default_options()}, jobs=1, root=tmp_path, cwd=tmp_path
    )
    result = engine.lint([tmp_path / "m.py"])
    assert [(f.path, f.rule, f.line) for f in result.findings] == [("m.py", RULE, 3)]
    (error,) = result.errors
    assert (error.path, error.line, error.column, error.rule) == ("m.py", 4, 5, "IC992")
    assert error.message == "internal error in IC992 (crashing) checking `Predictor.set_skip_topk`: KeyError: 'no such thing'"


def test_a_broken_configuration_elsewhere_in_the_root_does_not_fail_a_project_wide_search(tmp_path):
    """A project-wide question (the callers of a helper, found by a word search over the
    project's files) walks the whole root; a nested project whose `pyproject.toml` is broken
    holds none of this project's files, and must not turn the search into an internal error."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "reuse.py").write_text(textwrap.dedent("""\
        def begin_shared_indices(head, rows=None):
            head.set_skip_topk(True)
            if rows is not None:
                head.compact_topk_indices(rows)
        """))
    (tmp_path / "pkg" / "drafter.py").write_text(textwrap.dedent("""\
        from pkg.reuse import begin_shared_indices

        class Drafter:
            def propose(self, inputs, token_indices_to_sample):
                hidden = self.model(**inputs)
                begin_shared_indices(self.model.model)
                for _ in range(self.num_steps - 1):
                    hidden = self.model(**inputs)
        """))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "pyproject.toml").write_text('[tool.invariant-check]\nextend-select = ["IC992"]\n')
    (tmp_path / "other" / "m.py").write_text("x = 1\n")
    run = run_cli("lint", "--select", "IC002", "--format", "json", "--no-cache", "pkg", cwd=tmp_path)
    assert_no_traceback(run)
    doc = json.loads(run.out)
    assert doc["errors"] == []
    assert [(f["rule"], f["path"], f["line"]) for f in doc["findings"]] == [("IC002", "pkg/reuse.py", 2)]
    assert run.code == 1
