"""One table of the INVARIANT_CHECK_* variables (invariant_check/settings/envvars.py): the code parses
with it, the error messages list it, and the docs are written from it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from invariant_check.settings import envvars
from invariant_check.settings.envvars import UNSET, VARS, EnvError

ROOT = Path(__file__).resolve().parents[1]
CHOICE_VARS = [v for v in VARS if not v.free_form]


def _spellings():
    for var in CHOICE_VARS:
        for value in var.values:
            for spelling in value.spellings:
                yield pytest.param(var, spelling, value.result, id=f"{var.name}={spelling or 'unset'}")


@pytest.mark.parametrize("var, spelling, result", list(_spellings()))
def test_every_listed_spelling_is_accepted_in_any_case_and_with_spaces(var, spelling, result):
    assert var.parse(spelling) == result
    assert var.parse(f"  {spelling.upper()} ") == result
    if spelling == UNSET:
        assert var.parse(None) == result


@pytest.mark.parametrize("var", [v for v in CHOICE_VARS if v.names], ids=lambda v: v.name)
def test_comma_lists_of_names(var):
    assert var.parse(", ".join(var.names)) == frozenset(var.names)
    assert var.parse(f" {var.names[0].upper()} ,") == frozenset({var.names[0]})


@pytest.mark.parametrize("var", CHOICE_VARS, ids=lambda v: v.name)
@pytest.mark.parametrize("raw", ["maybe", "2", "y", "enable"])
def test_anything_else_is_refused_naming_the_variable_and_every_accepted_value(var, raw):
    with pytest.raises(EnvError) as info:
        var.parse(raw)
    msg = str(info.value)
    assert msg.startswith(f"{var.name}={raw!r} is not valid") and "\n" not in msg
    for value in var.values:
        for spelling in value.spellings:
            assert (spelling or "empty or unset") in msg
    for name in var.names:
        assert name in msg


def test_a_close_guard_name_is_suggested():
    with pytest.raises(EnvError) as info:
        envvars.BY_NAME["INVARIANT_CHECK_GUARDS"].parse("topk,group-metadata")
    assert "unknown: topk; did you mean topk-layout?" in str(info.value)


def test_the_guards_accept_what_the_table_lists(monkeypatch):
    from invariant_check.runtime_guards.config import GUARD_NAMES, ConfigError, parse_env

    for raw in ("yes", "on", "TRUE", "all", "1"):
        assert parse_env({"INVARIANT_CHECK_GUARDS": raw}).guards == frozenset(GUARD_NAMES)
    for raw in ("no", "off", "false", "none", "0", ""):
        assert parse_env({"INVARIANT_CHECK_GUARDS": raw}).guards == frozenset()
    with pytest.raises(ConfigError) as info:
        parse_env({"INVARIANT_CHECK_GUARDS": "sure"})
    msg = str(info.value)
    assert envvars.BY_NAME["INVARIANT_CHECK_GUARDS"].accepted() in msg and msg.endswith("No guard was installed.")


def test_the_compaction_reads_its_variables_through_the_table(monkeypatch):
    torch = pytest.importorskip("torch")
    from invariant_check.compaction.validate import want_value_checks

    meta = torch.zeros(3, dtype=torch.int64, device="meta")  # not CPU: the variable decides
    monkeypatch.setenv("INVARIANT_CHECK_COMPACTION_DEBUG", "yes")
    assert want_value_checks(meta, None) is True
    monkeypatch.setenv("INVARIANT_CHECK_COMPACTION_DEBUG", "off")
    assert want_value_checks(meta, None) is False
    monkeypatch.setenv("INVARIANT_CHECK_COMPACTION_DEBUG", "sometimes")
    with pytest.raises(ValueError, match="INVARIANT_CHECK_COMPACTION_DEBUG='sometimes' is not valid"):
        want_value_checks(meta, None)


def test_every_variable_the_code_reads_is_in_the_table():
    used = set()
    for folder in ("invariant_check", "runtime_guards", "rules"):
        for path in (ROOT / folder).rglob("*.py"):
            used |= set(re.findall(r"INVARIANT_CHECK_[A-Z][A-Z_]*[A-Z]", path.read_text()))
    assert used - {v.name for v in VARS} == set()


def test_docs_tables_are_written_from_the_table():
    res = subprocess.run([sys.executable, "-m", "invariant_check.settings.envvars", "--check"], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    for part, page in envvars.PAGES.items():
        text = (ROOT / page).read_text()
        assert envvars.markdown_table(part) in text
        for var in VARS:
            if var.part == part:
                assert f"| `{var.name}` |" in text


def test_a_stale_page_is_named_and_rewritten(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    page = tmp_path / "docs" / "guards.md"
    page.write_text(page.read_text().replace("every guard", "all of them", 1))
    check = subprocess.run([sys.executable, "-m", "invariant_check.settings.envvars", "--check"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert check.returncode == 1 and "docs/guards.md is stale" in check.stderr
    write = subprocess.run([sys.executable, "-m", "invariant_check.settings.envvars"], cwd=tmp_path, capture_output=True, text=True)
    assert write.returncode == 0 and page.read_text() == (ROOT / "docs" / "guards.md").read_text()
