"""finalize(): the contract the engine relies on (per-file-ignores, suppressions, IC900/IC901),
called directly, and Engine.lint(sources=...) for buffers that are not the file on disk."""

from __future__ import annotations

from pathlib import Path

from ic_support import BAD_CLASS, RULE

from invariant_check.lint.engine import Engine
from invariant_check.lint.finalize import SourceFile, finalize
from invariant_check.api.registry import all_rules
from invariant_check.adoption.suppressions import has_marker
from invariant_check.api.types import Candidate, Finding

NAME = all_rules()[RULE].NAME


def _cand(shown: str, line: int, statement_line: int | None = None) -> tuple[str, Candidate]:
    f = Finding(shown, line, 7, line, 10, RULE, NAME, "msg", "hint")
    return shown, Candidate(f, statement_line or line)


def _file(tmp_path: Path, shown: str, text: str, **kw) -> SourceFile:
    path = tmp_path / shown
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return SourceFile(path, shown, has_marker(text.encode()), **kw)


def test_comments_on_the_line_or_the_statement_line_suppress(tmp_path):
    text = "a = 1\nb = 2  # invariant-check: ignore[IC003]\nc = 3\nd = 4  # noqa: IC003\n"
    f = _file(tmp_path, "m.py", text)
    out = finalize([_cand("m.py", 2), _cand("m.py", 3, statement_line=2), _cand("m.py", 4), _cand("m.py", 1)], [f], enabled=[RULE])
    assert [x.line for x in out.findings] == [1]
    assert out.suppression_findings == []


def test_per_file_ignores_relative_to_root(tmp_path):
    files = [_file(tmp_path, "tests/t.py", "x = 1\n"), _file(tmp_path, "pkg/tests/u.py", "x = 1\n")]
    out = finalize(
        [_cand("tests/t.py", 1), _cand("pkg/tests/u.py", 1)], files, enabled=[RULE],
        per_file_ignores={"tests/*": [RULE]}, root=tmp_path,
    )
    assert [x.path for x in out.findings] == ["pkg/tests/u.py"]


def test_unused_and_invalid_reported_only_when_enabled(tmp_path):
    text = "a = 1  # invariant-check: ignore[IC003, IC001]\nb = 2  # invariant-check: ignore[IC03]\n"
    f = _file(tmp_path, "m.py", text)
    quiet = finalize([_cand("m.py", 1)], [f], enabled=[RULE, "IC001"])
    assert quiet.findings == [] and quiet.suppression_findings == []
    loud = finalize([_cand("m.py", 1)], [f], enabled=[RULE, "IC001", "IC900", "IC901"])
    assert [(x.rule, x.line) for x in loud.suppression_findings] == [("IC900", 1), ("IC901", 2)]
    assert "`IC001` in `# invariant-check: ignore[IC003, IC001]`" in loud.suppression_findings[0].message
    # an unparsable file's comments had no chance to be used; an invalid one is still invalid
    broken = finalize([], [SourceFile(f.path, f.shown, True, parsed=False)], enabled=[RULE, "IC001", "IC900", "IC901"])
    assert [x.rule for x in broken.suppression_findings] == ["IC901"]


def test_given_bytes_win_over_the_file_and_unreadable_files_are_quiet(tmp_path):
    f = _file(tmp_path, "m.py", "x = 1\n")  # on disk: no comment
    buffer = b"x = 1  # invariant-check: ignore[IC003]\n"
    out = finalize([_cand("m.py", 1)], [SourceFile(f.path, "m.py", True, source=buffer)], enabled=[RULE])
    assert out.findings == []
    gone = SourceFile(tmp_path / "gone.py", "gone.py", True)
    out = finalize([_cand("gone.py", 1)], [gone], enabled=[RULE, "IC900", "IC901"])
    assert [x.path for x in out.findings] == ["gone.py"] and out.suppression_findings == []


def test_engine_lints_given_bytes_instead_of_the_file(tmp_path):
    (tmp_path / "m.py").write_text("x = 1\n")
    rule = all_rules()[RULE]
    engine = Engine([rule, all_rules()["IC901"]], {RULE: rule.default_options(), "IC901": {}}, jobs=1, root=tmp_path, cwd=tmp_path)
    assert engine.lint([tmp_path / "m.py"]).findings == []
    result = engine.lint([tmp_path / "m.py", tmp_path / "new.py"], {tmp_path / "m.py": BAD_CLASS.encode(), tmp_path / "new.py": b"y = 2  # noqa: IC33\n"})
    assert [(f.path, f.rule) for f in result.findings] == [("m.py", RULE), ("new.py", "IC901")]
    # the engine-emitted rule is not run as an analysis rule
    assert engine.codes == [RULE] and engine.emitted == ["IC901"]
