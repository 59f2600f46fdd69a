"""Mutation test for IC001 and IC002 (issue 3): rewritten fixtures through the real engine.

Meaning-preserving rewrites (renames, aliases, helpers in other modules, `if` wrappers,
split lines, comments, `isinstance` -> `type(x) in`) must keep every buggy fixture reported
and every fixed one silent; bug-injecting rewrites (delete the compaction, move it after
the next forward, move a per-group check after the loop) must be reported, also after any
meaning-preserving rewrite. `bench/mutation_report.py` prints the same table.
"""

from __future__ import annotations

import libcst as cst
import mutations as M  # tests/mutation_fixtures, on pytest's pythonpath (pyproject.toml)
import pytest

from invariant_check.api.registry import all_rules

RULES = sorted({"IC001", "IC002"} & set(all_rules()))


@pytest.fixture(scope="module")
def outcomes():
    return M.run(set(RULES))


def _rewrites_for(rule):
    return [rw for rw in M.REWRITES if rule in rw.rules]


@pytest.mark.parametrize("rule", ["IC001", "IC002"])
def test_every_rewrite_applies_and_changes_the_source(rule):
    if rule not in RULES:
        pytest.skip(f"{rule} is not registered")
    fixtures = [fx for fx in M.fixtures() if fx.rule == rule]
    assert any(fx.buggy for fx in fixtures) and any(not fx.buggy for fx in fixtures)
    for rw in _rewrites_for(rule):
        applied = 0
        for fx in fixtures:
            if rw.injects and fx.buggy:
                continue
            out = rw.apply(dict(fx.files))
            if out is None:
                continue
            applied += 1
            if rw.name != "identity":
                assert out != fx.files, f"{rw.name} left {fx.name} unchanged"
            for name, text in out.items():
                if name.endswith(".py"):
                    cst.parse_module(text)
                    # and valid for the Python running the linter, not only for libcst
                    compile(text, name, "exec", dont_inherit=True)
        assert applied, f"{rw.name} applies to no {rule} fixture"


def test_injections_remove_what_they_claim():
    fixed = {fx.name: fx for fx in M.fixtures() if not fx.buggy}
    gone = M.delete_compaction(fixed["ic002_proposer_fixed"].files)[M.MAIN]
    assert "compact_topk_indices(" not in gone
    moved = M.compaction_after_forward(fixed["ic002_proposer_fixed"].files)[M.MAIN]
    lines = moved.splitlines()
    forward = next(i for i, l in enumerate(lines) if "self.model(**inputs)" in l and i > 20)
    assert "compact_topk_indices(" in lines[forward + 1]
    after = M.check_after_loop(fixed["ic001_groups_fixed"].files)[M.MAIN]
    check = next(i for i, l in enumerate(after.splitlines()) if "isinstance(" in l)
    assert after.splitlines()[check].startswith("        if not"), "the check left the loop body"


@pytest.mark.parametrize(
    "rule,rewrite",
    [(rule, name) for rule in ("IC001", "IC002") for name in M.table_rows_for(rule)],
)
def test_rates(outcomes, rule, rewrite):
    if rule not in RULES:
        pytest.skip(f"{rule} is not registered")
    rows = {(r.rule, r.rewrite): r for r in M.table(outcomes)}
    row = rows.get((rule, rewrite))
    assert row is not None, f"no variant of {rewrite} for {rule}"
    failed = [o for o in outcomes if o.rule == rule and o.rewrite == rewrite and not o.ok]
    assert row.buggy_variants + row.clean_variants > 0
    if row.buggy_variants:
        assert row.detection_rate == 1.0, f"missed: {failed}"
    if row.clean_variants:
        assert row.false_alarm_rate == 0.0, f"false alarms: {failed}"


def test_prefilter_changes_nothing(outcomes):
    # The cross-file pass parses only some files when prefiltering; parsing every file must
    # give the same findings on every variant.
    variants = list(M.variants(set(RULES)))
    assert len(variants) == len(outcomes)
    for (name, fx, files, _), o in zip(variants, outcomes):
        assert (name, fx.name) == (o.rewrite, o.fixture)
        assert M.lint(files, fx.rule, prefilter=False) == o.lines, (name, fx.name)


def test_outcome_judges_the_line():
    # A finding elsewhere than the switch does not count as detecting it.
    o = M.Outcome("x", "f", "IC002", True, True, lines=[3], expected_lines=[7])
    assert not o.ok
    assert M.Outcome("x", "f", "IC002", True, True, lines=[7], expected_lines=[7]).ok
    assert not M.Outcome("x", "f", "IC002", False, True, lines=[7]).ok
    # nor does a finding at the site with another one elsewhere, or the site reported twice
    assert not M.Outcome("x", "f", "IC001", True, True, lines=[7, 9], expected_lines=[7]).ok
    assert not M.Outcome("x", "f", "IC001", True, True, lines=[7, 7], expected_lines=[7]).ok


def test_ic001_sites_are_the_checks_after_the_loop():
    fx = {f.name: f for f in M.fixtures()}
    # `if not isinstance(attn_metadata, ...)` after the loop; not the `type(...)` in its message
    assert M.check_lines(fx["ic001_groups_buggy"].files[M.MAIN]) == [11]
    # the `assert isinstance(...)`; the `return isinstance(...)` is an answer, not a check
    assert M.check_lines(fx["ic001_assert_buggy"].files[M.MAIN]) == [7]
    # inside the loop: nothing
    assert M.check_lines(fx["ic001_groups_fixed"].files[M.MAIN]) == []
