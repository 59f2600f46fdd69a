"""docs/rules/ is generated from the rule classes by scripts/gen_rule_docs.py and must not go stale.

The first test is the one CI relies on: after a rule's docstring, options or examples change,
it fails until `python scripts/gen_rule_docs.py` is rerun and the pages are committed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from invariant_check.api.registry import all_rules
from invariant_check.api.rule import Rule
from invariant_check.api.types import Invalid, Option, Valid

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gen_rule_docs.py"
DOCS = ROOT / "docs" / "rules"


def gen(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("gen_rule_docs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_pages_are_up_to_date():
    res = gen("--check")
    assert res.returncode == 0, (
        f"docs/rules is stale: run `python scripts/gen_rule_docs.py` and commit the pages\n{res.stdout}{res.stderr}"
    )
    expected = {f"{code}-{rule.NAME}.md" for code, rule in all_rules().items()} | {"README.md"}
    assert {p.name for p in DOCS.glob("*.md")} == expected


def test_check_names_stale_missing_and_extra_pages_and_writing_fixes_them(tmp_path):
    out = tmp_path / "rules"
    written = gen("--docs-dir", str(out))
    assert written.returncode == 0, written.stderr
    assert gen("--check", "--docs-dir", str(out)).returncode == 0

    first, second = sorted(p for p in out.glob("IC*.md"))[:2]
    first.write_text(first.read_text() + "\nhand edit\n")
    second.unlink()
    (out / "IC999-retired-rule.md").write_text("# gone\n")
    res = gen("--check", "--docs-dir", str(out))
    assert res.returncode == 1, res.stdout
    lines = res.stdout.splitlines()
    assert f"{out / first.name}: stale" in lines
    assert f"{out / second.name}: missing" in lines
    assert f"{out / 'IC999-retired-rule.md'}: no rule generates it" in lines
    assert "python scripts/gen_rule_docs.py" in lines[-1]
    assert (out / "IC999-retired-rule.md").exists(), "--check must write nothing"

    fixed = gen("--docs-dir", str(out))
    assert fixed.returncode == 0, fixed.stderr
    assert not (out / "IC999-retired-rule.md").exists()
    assert gen("--check", "--docs-dir", str(out)).returncode == 0
    assert "(0 changed)" in gen("--docs-dir", str(out)).stdout


def test_a_page_holds_the_rule_docstring_options_and_every_tested_example(tmp_path, script):
    out = tmp_path / "rules"
    assert gen("--docs-dir", str(out)).returncode == 0
    index = (out / "README.md").read_text()
    for code, rule in all_rules().items():
        page = (out / f"{code}-{rule.NAME}.md").read_text()
        assert page.splitlines()[1] == f"# {code} `{rule.NAME}`"
        assert rule.SUMMARY in page and f"({code}-{rule.NAME}.md)" in index
        assert rule.documentation().strip() in page
        for key, opt in rule.OPTIONS.items():
            assert f"| `{key}` |" in page
            assert f"{key} = {script.toml_value(opt.default)}" in page
        for example in [*rule.VALID, *rule.INVALID]:
            assert textwrap.dedent(example.code).strip("\n") in page
            for code_beside in example.files.values():
                assert textwrap.dedent(code_beside).strip("\n") in page
        for example in rule.INVALID:
            assert f"Reported at line {example.line}" in page


def test_caption_is_the_comment_above_the_example(script):
    rules = all_rules()
    # Every example list of the shipped rules is a literal: each example gets its caption slot.
    for rule in rules.values():
        captions = script.example_captions(rule)
        for kind in ("VALID", "INVALID"):
            if getattr(rule, kind):
                assert len(captions.get(kind, [])) == len(getattr(rule, kind)), (rule.CODE, kind)
    assert any(c for rule in rules.values() for cs in script.example_captions(rule).values() for c in cs)


class _MadeUpRule(Rule):
    """
    ## What it does
    Flags a made-up call.

    ## Why is this bad?
    It is made up.

    ## Example
    ```python
    made_up()
    ```

    ## Use instead
    ```python
    pass
    ```

    ## Options
    - `calls`: the calls to flag.
    """

    CODE = "IC777"
    NAME = "made-up-call"
    SUMMARY = "A call written for this test."
    OPTIONS = {"calls": Option(["made_up"], "calls to flag"), "depth": Option(2, "a number", int)}
    VALID = [
        # Nothing is called.
        Valid("x = 1\n"),
    ]
    INVALID = [
        # The one call it knows, with `backticks` in the caption.
        Invalid("made_up()\n", line=1, message_contains="`made_up`"),
    ]


def test_a_rule_found_by_the_registry_gets_a_page_without_touching_the_script(script, monkeypatch, tmp_path):
    rules = dict(all_rules())
    rules["IC777"] = _MadeUpRule
    monkeypatch.setattr("invariant_check.api.registry.all_rules", lambda: rules)
    assert script.main(["--docs-dir", str(tmp_path)]) == 0
    page = (tmp_path / "IC777-made-up-call.md").read_text()
    assert "# IC777 `made-up-call`" in page
    assert "| `depth` | integer | `2` | a number |" in page
    assert 'calls = ["made_up"]\ndepth = 2' in page
    assert "**1.** Nothing is called." in page
    assert "**1.** The one call it knows, with `backticks` in the caption. Reported at line 1: `made_up()`." in page
    assert "The message contains `` `made_up` ``." in page
    assert "[IC777](IC777-made-up-call.md)" in (tmp_path / "README.md").read_text()


def test_a_rule_that_cannot_render_is_one_line_and_exit_2(script, monkeypatch, tmp_path, capsys):
    class Broken(_MadeUpRule):
        OPTIONS = {"when": Option(object(), "not a TOML value", str)}

    monkeypatch.setattr("invariant_check.api.registry.all_rules", lambda: {"IC777": Broken})
    assert script.main(["--check", "--docs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gen_rule_docs: error: cannot render the rule pages: TypeError") and err.count("\n") == 1


def test_docs_dir_that_is_a_file_is_exit_2(tmp_path):
    target = tmp_path / "file.md"
    target.write_text("x")
    res = gen("--docs-dir", str(target))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == f"gen_rule_docs: error: {target} is not a folder"
