"""The one glob dialect (invariant_check/globs.py): paths for exclude/per-file-ignores/--exclude,
names for rule options, and the literals a prefilter may rely on."""

from __future__ import annotations

import fnmatch
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ic_support import BAD_CLASS, RULE, assert_no_traceback, run_cli

from invariant_check.globs import PathGlobs, name_matcher, name_regex, required_literals

BASE = "/proj"


@pytest.mark.parametrize(
    "pattern, path, is_dir, expected",
    [
        # no slash: a name at any depth, and everything below a matching folder
        ("tests", "/proj/tests", True, True),
        ("tests", "/proj/pkg/tests/x.py", False, True),
        ("*.egg-info", "/proj/a/b.egg-info", True, True),
        ("m[0-3].py", "/proj/many/m2.py", False, True),
        ("m[0-3].py", "/proj/many/m7.py", False, False),
        ("m[!0-3].py", "/proj/many/m7.py", False, True),
        # a slash anchors at the base: `tests/*` is the top folder's tests only
        ("tests/*", "/proj/tests/x.py", False, True),
        ("tests/*", "/proj/tests/deep/x.py", False, True),  # below a matched folder
        ("tests/*", "/proj/pkg/tests/x.py", False, False),
        ("**/tests/*", "/proj/pkg/tests/x.py", False, True),
        ("**/tests/*", "/proj/tests/x.py", False, True),
        ("pkg/*.py", "/proj/pkg/sub/x.py", False, False),  # `*` stays within a folder
        ("pkg/**/*.py", "/proj/pkg/sub/deep/x.py", False, True),
        ("pkg/**", "/proj/pkg/x.py", False, True),
        ("pkg/**", "/proj/pkg", True, False),  # its contents, not the folder itself
        # a trailing slash: folders only (and what is below them)
        ("build/", "/proj/build", True, True),
        ("build/", "/proj/build", False, False),
        ("build/", "/proj/build/x.py", False, True),
        # `./` and `../` are places relative to the base; absolute paths are absolute
        ("./vllm/x", "/proj/vllm/x/y.py", False, True),
        ("./vllm/x", "/proj/other/vllm/x/y.py", False, False),
        ("./tests", "/proj/pkg/tests/x.py", False, False),
        ("../sibling", "/sibling/a.py", False, True),
        ("/elsewhere/gen", "/elsewhere/gen/a.py", False, True),
        ("/elsewhere/gen", "/proj/elsewhere/gen/a.py", False, False),
        # escapes and a class never cross a folder
        (r"a\*b.py", "/proj/a*b.py", False, True),
        (r"a\*b.py", "/proj/axb.py", False, False),
        ("a[/]b.py", "/proj/a/b.py", False, False),
        ("a?b.py", "/proj/a/b.py", False, False),
        # an unclosed bracket is a literal, as fnmatch reads it
        ("a[b.py", "/proj/a[b.py", False, True),
    ],
)
def test_path_patterns(pattern, path, is_dir, expected):
    assert PathGlobs([pattern], BASE).match_tree(path, is_dir) is expected


def test_name_patterns_do_not_climb_above_the_base():
    # a folder above the base that happens to be called `tests` excludes nothing
    assert not PathGlobs(["tests"], "/home/tests/proj").match_tree("/home/tests/proj/a.py", False)
    # outside the base a name pattern still matches the path's own name
    assert PathGlobs(["*_pb2.py"], BASE).match_tree("/other/x_pb2.py", False)


# -- names ----------------------------------------------------------------------------------------


def test_name_matcher():
    md = name_matcher(["*metadata*", "*_md", "md"], case_sensitive=False)
    assert md("attn_metadata") and md("ATTN_METADATA") and md("common_md") and md("md")
    assert not md("mdx") and not md("model")
    plan = name_matcher(["plan[0-9]"], case_sensitive=True)
    assert plan("plan7") and not plan("plan") and not plan("plan77") and not plan("PLAN7")
    assert not name_matcher([], case_sensitive=True)("anything")


@pytest.mark.parametrize(
    "pattern, literals",
    [("plan[0-9]", ["plan"]), ("*_md", ["_md"]), ("*metadata*", ["metadata"]), ("*", []),
     ("a?b", ["a", "b"]), (r"x\*y", ["x*y"]), ("[ab]c[!d]e", ["c", "e"]), ("a[b", ["a[b"])],
)
def test_required_literals(pattern, literals):
    assert required_literals(pattern) == literals


GLOB_PIECES = st.sampled_from(["a", "b", "_", "*", "?", "[ab]", "[!a]", "[a-c]", "**"])
NAMES = st.text(alphabet="ab_c", max_size=8)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(GLOB_PIECES, min_size=1, max_size=6).map("".join), NAMES)
def test_names_agree_with_fnmatch_and_literals_are_sound(pattern, name):
    matched = name_matcher([pattern], case_sensitive=True)(name)
    # on names the dialect is fnmatch's (case-sensitive)
    assert matched == fnmatch.fnmatchcase(name, pattern)
    # the regex source for prefilters recognises the same identifiers
    assert matched == (re.fullmatch(name_regex(pattern), name) is not None)
    if matched:
        # a prefilter that looks for these literals never drops a match
        assert all(lit in name for lit in required_literals(pattern))


# -- one meaning everywhere, through the real command ---------------------------------------------


def _tree(tmp_path):
    for rel in ("tests/x.py", "pkg/tests/y.py", "pkg/z.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(BAD_CLASS)
    return tmp_path


def _flagged(tmp_path, *args):
    run = run_cli("lint", "--select", RULE, "--format", "json", "--no-cache", *args, cwd=tmp_path)
    assert_no_traceback(run)
    return sorted({f["path"] for f in json.loads(run.out)["findings"]})


@pytest.mark.parametrize("pattern", ["tests/*", "tests", "**/tests/*", "./tests", "pkg/z.py"])
def test_exclude_and_per_file_ignores_match_the_same_files(tmp_path, pattern):
    _tree(tmp_path)
    everything = _flagged(tmp_path, ".")
    (tmp_path / "pyproject.toml").write_text(f'[tool.invariant-check]\nextend-exclude = ["{pattern}"]\n')
    kept_by_exclude = _flagged(tmp_path, ".")
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.invariant-check.per-file-ignores]\n"{pattern}" = ["{RULE}"]\n'
    )
    kept_by_ignores = _flagged(tmp_path, ".")
    (tmp_path / "pyproject.toml").unlink()
    kept_by_option = _flagged(tmp_path, "--exclude", pattern, ".")
    assert kept_by_exclude == kept_by_ignores == kept_by_option
    assert kept_by_exclude != everything


def test_exclude_anchoring(tmp_path):
    _tree(tmp_path)
    # the case: `tests/*` is the top folder's tests, not pkg/tests
    assert _flagged(tmp_path, "--exclude", "tests/*", ".") == ["pkg/tests/y.py", "pkg/z.py"]
    assert _flagged(tmp_path, "--exclude", "tests", ".") == ["pkg/z.py"]


def test_exclude_dot_slash_and_absolute_paths(tmp_path):
    _tree(tmp_path)
    assert _flagged(tmp_path, "--exclude", "./pkg/tests", ".") == ["pkg/z.py", "tests/x.py"]
    assert _flagged(tmp_path, "--exclude", str(tmp_path / "pkg"), ".") == ["tests/x.py"]
    assert _flagged(tmp_path, "--exclude", str(tmp_path / "pkg" / "z.py"), ".") == ["pkg/tests/y.py", "tests/x.py"]
    # relative to the current folder, not to the configuration's
    assert _flagged(tmp_path / "pkg", "--exclude", "./tests", ".") == ["z.py"]
    # a named file inside an excluded folder is skipped too (pre-commit names files)
    assert _flagged(tmp_path, "--exclude", "./pkg", "pkg/z.py", "tests/x.py") == ["tests/x.py"]
