"""`[tool.invariant-check]`: finding the file, validating every key, merging options."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ic_support import BAD_CLASS, run_cli

from invariant_check.settings.config import (
    DEFAULT_EXCLUDES,
    KNOWN_KEYS,
    ConfigError,
    find_config,
    load_config,
    parse_table,
)
from invariant_check.api.registry import all_rules
from invariant_check.api.types import Option

RULE = "IC003"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_find_config_walks_up_to_the_table(tmp_path):
    top = write(tmp_path / "pyproject.toml", "[tool.invariant-check]\n")
    write(tmp_path / "a" / "pyproject.toml", "[project]\nname = 'x'\n")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "m.py").write_text("")
    assert find_config([deep / "m.py"]) == top
    assert find_config([deep]) == top
    near = write(tmp_path / "a" / "pyproject.toml", "[tool.invariant-check]\nselect = []\n")
    assert find_config([deep]) == near


def test_find_config_uses_the_common_folder_of_all_paths(tmp_path):
    top = write(tmp_path / "pyproject.toml", "[tool.invariant-check]\n")
    write(tmp_path / "a" / "pyproject.toml", "[tool.invariant-check]\n")
    (tmp_path / "b").mkdir()
    # a/ and b/ share only tmp_path: its config is the nearest to both
    assert find_config([tmp_path / "a", tmp_path / "b"]) == top


def test_find_config_nonexistent_and_looping_paths_do_not_raise(tmp_path):
    top = write(tmp_path / "pyproject.toml", "[tool.invariant-check]\n")
    os.symlink(tmp_path / "loop_b.py", tmp_path / "loop_a.py")
    os.symlink(tmp_path / "loop_a.py", tmp_path / "loop_b.py")
    assert find_config([tmp_path / "loop_a.py"]) == top
    assert find_config([tmp_path / "nope" / "x.py"]) == top


def test_find_config_skips_broken_unrelated_toml_but_returns_broken_own(tmp_path):
    top = write(tmp_path / "pyproject.toml", "[tool.invariant-check]\n")
    write(tmp_path / "a" / "pyproject.toml", "[project\nname=")  # someone else's broken file
    assert find_config([tmp_path / "a"]) == top
    own = write(tmp_path / "a" / "pyproject.toml", "[tool.invariant-check\nselect=")
    assert find_config([tmp_path / "a"]) == own
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(own)


@pytest.mark.parametrize("text", ["tool = 3\n", "[tool]\ninvariant-check = 3\n"])
def test_non_table_tool_sections(tmp_path, text):
    path = write(tmp_path / "pyproject.toml", text)
    find_config([tmp_path])  # must not raise
    with pytest.raises(ConfigError, match="must be a table"):
        load_config(path)


def test_no_config_means_defaults(tmp_path):
    cfg = load_config(None, fallback_root=tmp_path)
    assert cfg.select is None and cfg.ignore == [] and cfg.options == {}
    assert cfg.root == tmp_path.resolve()
    assert cfg.rule_options(RULE) == all_rules()[RULE].default_options()


def test_every_known_key_parses(tmp_path):
    path = write(
        tmp_path / "pyproject.toml",
        """
[tool.invariant-check]
select = ["IC"]
ignore = ["IC003"]
exclude = ["gen/"]
extend-exclude = ["third_party"]
cache-dir = ".cache/ic"
jobs = 3

[tool.invariant-check.per-file-ignores]
"tests/*.py" = ["IC003"]

[tool.invariant-check.options.IC003]
switch-method = "use_shared"
""",
    )
    cfg = load_config(path)
    assert set(cfg.select) == set(all_rules())  # a prefix selects every rule it starts
    assert cfg.ignore == ["IC003"]
    assert cfg.exclude == ["gen/"] and cfg.extend_exclude == ["third_party"]
    assert cfg.user_excludes == ["gen/", "third_party"]
    assert cfg.walk_excludes == ()  # setting `exclude` replaces the default list, as in ruff
    assert cfg.cache_dir == (tmp_path / ".cache" / "ic").resolve()
    assert cfg.jobs == 3
    assert cfg.per_file_ignores == {"tests/*.py": ["IC003"]}
    opts = cfg.rule_options(RULE)
    assert opts["switch-method"] == "use_shared"
    # unset options keep their defaults
    assert opts["compaction-method"] == all_rules()[RULE].default_options()["compaction-method"]


def test_rule_named_by_its_name_in_options(tmp_path):
    name = all_rules()[RULE].NAME
    cfg = parse_table({"options": {name: {"switch-method": "x"}}}, tmp_path / "pyproject.toml")
    assert cfg.options == {RULE: {"switch-method": "x"}}


@pytest.mark.parametrize(
    "table, needles",
    [
        ({"selct": ["IC003"]}, ["unknown key", "selct"]),
        ({"select": ["IC003", "IC998", "nope"]}, ["IC998", "nope"]),
        ({"ignore": "IC003"}, ["ignore must be a list"]),
        ({"exclude": [1]}, ["exclude must be a list"]),
        ({"per-file-ignores": ["x"]}, ["per-file-ignores"]),
        ({"per-file-ignores": {"a.py": "IC003"}}, ["per-file-ignores", "a.py"]),
        ({"per-file-ignores": {"a.py": ["IC997"]}}, ["IC997"]),
        ({"options": {"IC996": {}}}, ["IC996"]),
        ({"options": {"IC003": 1}}, ["must be a table"]),
        ({"options": {"IC003": {"swtich-method": "x"}}}, ["unknown option", "swtich-method", "switch-method"]),
        ({"options": {"IC003": {"switch-method": ["x"]}}}, ["switch-method", "str"]),
        ({"options": {"IC003": {"external-bases": "nn.Module"}}}, ["external-bases", "list of strings"]),
        ({"cache-dir": 1}, ["cache-dir"]),
        ({"jobs": 0}, ["jobs"]),
        ({"jobs": True}, ["jobs"]),
        ({"jobs": "2"}, ["jobs"]),
    ],
)
def test_invalid_tables_name_the_problem_on_one_line(tmp_path, table, needles):
    with pytest.raises(ConfigError) as info:
        parse_table(table, tmp_path / "pyproject.toml")
    message = str(info.value)
    assert "\n" not in message
    assert "pyproject.toml" in message
    for needle in needles:
        assert needle in message


def test_unknown_key_error_lists_known_keys(tmp_path):
    with pytest.raises(ConfigError) as info:
        parse_table({"bogus": 1, "other": 2}, tmp_path / "pyproject.toml")
    assert "bogus, other" in str(info.value)
    for key in KNOWN_KEYS:
        assert key in str(info.value)


def test_unreadable_or_missing_explicit_config(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(write(tmp_path / "bad.toml", "x = \n"))
    bad_utf8 = tmp_path / "pyproject.toml"
    bad_utf8.write_bytes(b"[tool.invariant-check]\nselect = ['\xff']\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(bad_utf8)


# -- option values, new keys, and what `exclude` replaces -------------------------------------------


@pytest.mark.parametrize("value", [-1, -100, True, 1.5, "2"])
def test_int_options_are_counts(tmp_path, value):
    with pytest.raises(ConfigError) as info:
        parse_table({"options": {"IC002": {"helper-depth": value}}}, tmp_path / "pyproject.toml")
    message = str(info.value)
    assert "helper-depth" in message and "must be an integer >= 0" in message
    assert f"got {value!r}" in message and "must be an int " not in message + " "


def test_int_option_bounds(tmp_path):
    assert parse_table({"options": {"IC002": {"helper-depth": 0}}}, tmp_path / "p.toml").options == {"IC002": {"helper-depth": 0}}
    bounded = Option(3, "how many", int, minimum=1)
    assert bounded.validate("k", 1) == 1
    with pytest.raises(ValueError, match=r"'k' must be an integer >= 1, got 0"):
        bounded.validate("k", 0)
    with pytest.raises(ValueError, match=r"'s' must be a string, got \['x'\]"):
        Option("x", "a name", str).validate("s", ["x"])


def test_new_keys_parse(tmp_path):
    cfg = parse_table(
        {"extend-select": ["IC900"], "respect-gitignore": False, "extend-exclude": ["gen"]},
        tmp_path / "pyproject.toml",
    )
    assert cfg.extend_select == ["IC900"] and cfg.respect_gitignore is False
    assert cfg.exclude is None and cfg.walk_excludes == DEFAULT_EXCLUDES and cfg.user_excludes == ["gen"]
    with pytest.raises(ConfigError, match="extend-select"):
        parse_table({"extend-select": ["IC9999"]}, tmp_path / "pyproject.toml")


def test_exclude_replaces_the_defaults_extend_exclude_keeps_them(tmp_path):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "bad.py").write_text(BAD_CLASS)
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "bad.py").write_text(BAD_CLASS)

    def flagged() -> set[str]:
        run = run_cli("lint", "--select", RULE, "--format", "json", "--no-cache", ".", cwd=tmp_path)
        return {f["path"] for f in json.loads(run.out)["findings"]}

    assert flagged() == {"gen/bad.py"}  # build/ is a default exclude
    write(tmp_path / "pyproject.toml", '[tool.invariant-check]\nextend-exclude = ["gen"]\n')
    assert flagged() == set()
    write(tmp_path / "pyproject.toml", '[tool.invariant-check]\nexclude = ["gen"]\n')
    assert flagged() == {"build/bad.py"}


# -- what a configuration accepts but probably did not mean: warnings and suggestions ----------


@pytest.mark.parametrize(
    "table, message",
    [
        ('extend_select = ["IC900"]', "unknown key(s) extend_select (did you mean extend-select?)"),
        ('selct = ["IC003"]', "unknown key(s) selct (did you mean select?)"),
        ('select = ["IC02"]', "unknown rule code(s) IC02 (did you mean IC002?)"),
        ('ignore = ["stale-derived"]', "unknown rule code(s) stale-derived (did you mean stale-derived-metadata?)"),
        ("[tool.invariant-check.options.IC002]\nhelper_depth = 2", "unknown option(s) helper_depth (did you mean helper-depth?)"),
        ("[tool.invariant-check.options.IC02]\nhelper-depth = 2", "options.IC02: unknown rule code or name (did you mean IC002?)"),
    ],
)
def test_a_typo_gets_the_nearest_key_option_or_rule(tmp_path, table, message):
    head = "" if table.startswith("[") else "[tool.invariant-check]\n"
    write(tmp_path / "pyproject.toml", head + table + "\n")
    write(tmp_path / "m.py", "x = 1\n")
    run = run_cli("lint", "--no-cache", ".", cwd=tmp_path)
    assert run.code == 2 and run.out == ""
    (line,) = run.err.strip().splitlines()
    assert message in line, line


def test_one_rules_options_under_its_code_and_its_name_warn_and_merge(tmp_path):
    write(tmp_path / "pyproject.toml",
          "[tool.invariant-check.options.IC001]\nmetadata-names = ['md']\n"
          "[tool.invariant-check.options.last-entry-validation]\nmetadata-names = ['plan']\n")
    cfg = load_config(tmp_path / "pyproject.toml")
    assert cfg.options["IC001"]["metadata-names"] == ["plan"]  # file order: the later wins
    (warning,) = cfg.warnings
    assert "options.IC001 and options.last-entry-validation both configure IC001" in warning
    assert "options.last-entry-validation wins for metadata-names" in warning
    write(tmp_path / "m.py", "x = 1\n")
    run = run_cli("lint", "--no-cache", ".", cwd=tmp_path)
    assert run.code == 0 and f"invariant-check: warning: {warning}" in run.err
    assert "warning" not in run_cli("lint", "-q", "--no-cache", ".", cwd=tmp_path).err  # -q: findings only


def test_per_file_ignores_glob_matching_no_file_warns_on_a_whole_tree_run(tmp_path):
    write(tmp_path / "pyproject.toml",
          '[tool.invariant-check.per-file-ignores]\n"tests/*" = ["IC003"]\n"**/tests/*" = ["IC003"]\n'
          '"legacy_*.py" = ["IC003"]\n')
    write(tmp_path / "pkg" / "tests" / "t.py", "x = 1\n")
    write(tmp_path / "pkg" / "a.py", "x = 1\n")
    whole = run_cli("lint", "--no-cache", ".", cwd=tmp_path)
    assert whole.code == 0
    warned = [l for l in whole.err.splitlines() if "matches no linted file" in l]
    # `tests/*` is anchored at the configuration's folder: only `pkg/tests` exists
    assert len(warned) == 2 and "per-file-ignores.'tests/*'" in warned[0] and "'legacy_*.py'" in warned[1]
    assert str(tmp_path) in warned[0]
    # a run on some files (a pre-commit batch) cannot tell: no warning
    part = run_cli("lint", "--no-cache", "pkg/a.py", cwd=tmp_path)
    assert part.code == 0 and "matches no" not in part.err
    sub = run_cli("lint", "--no-cache", "pkg", cwd=tmp_path)
    assert "matches no" not in sub.err
