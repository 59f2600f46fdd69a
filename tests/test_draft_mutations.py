"""Mutation test for IC004 and IC005 (issue 10): rewritten fixtures through the real engine.

Meaning-preserving rewrites (renames, aliases, the update or the advance moved into a helper
of another module, the rebuild turned into a refresh through a helper, the update before the
advance, `if` wrappers, `for` -> `while`, split lines, comments) must keep every buggy fixture
reported at its site and every fixed one silent; bug-injecting rewrites (the update or the
rebuild deleted, moved out of the loop, put under a narrower condition or on the first step
only) must be reported, also after any meaning-preserving rewrite.
"""

from __future__ import annotations

import draft_mutations as D  # tests/mutation_fixtures, on pytest's pythonpath (pyproject.toml)
import libcst as cst
import pytest

RULES = ("IC004", "IC005")


@pytest.fixture(scope="module")
def outcomes():
    return D.run(set(RULES))


@pytest.mark.parametrize("rule", RULES)
def test_every_rewrite_applies_and_changes_the_source(rule):
    fixtures = [fx for fx in D.fixtures() if fx.rule == rule]
    assert any(fx.buggy for fx in fixtures) and any(not fx.buggy for fx in fixtures)
    for rw in D.REWRITES:
        if rule not in rw.rules:
            continue
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
                cst.parse_module(text)
                compile(text, name, "exec", dont_inherit=True)
        assert applied, f"{rw.name} applies to no {rule} fixture"


def test_fixtures_are_reported_where_the_bug_is():
    for fx in D.fixtures():
        sites = D.lint(fx.files, fx.rule)
        if fx.buggy:
            assert sites and set(sites) <= D.expected_sites(fx.rule, fx.files), (fx.name, sites)
        else:
            assert sites == [], (fx.name, sites)


def test_injections_do_what_they_claim():
    fixed = {fx.name: fx for fx in D.fixtures() if not fx.buggy}
    loop = fixed["ic004_loop_fixed"].files
    assert ".max_seq_len" not in D.delete_fix(loop)[D.MAIN]
    moved = D.fix_out_of_loop(loop)[D.MAIN].splitlines()
    at = next(i for i, line in enumerate(moved) if "max_seq_len = min(" in line)
    assert moved[at].startswith("        common"), "the update left the loop body"
    narrowed = D.narrow_condition(loop)[D.MAIN]
    assert "if self.uses_mrope:" in narrowed
    assert "seq_lens_cpu_upper_bound=" not in D.delete_fix(fixed["ic004_copy_fixed"].files)[D.MAIN]
    v2 = fixed["ic005_v2_fixed"].files
    assert D.delete_fix(v2)[D.MAIN].count("build_draft_attn_metadata") == 1  # the one before the loop
    first = D.fix_on_first_step(v2)[D.MAIN]
    assert "if step == 1:" in first
    hoisted = D.fix_out_of_loop(fixed["ic005_groups_fixed"].files)[D.MAIN]
    loop_line = next(i for i, line in enumerate(hoisted.splitlines()) if "for token_index in" in line)
    refill = next(i for i, line in enumerate(hoisted.splitlines()) if "per_layer_attn_metadata[layer_name]" in line)
    assert refill < loop_line


@pytest.mark.parametrize("rule,rewrite", [(rule, name) for rule in RULES for name in D.table_rows_for(rule)])
def test_rates(outcomes, rule, rewrite):
    got = [o for o in outcomes if o.rule == rule and o.rewrite == rewrite]
    assert got, f"no variant of {rewrite} for {rule}"
    failed = [o for o in got if not o.ok]
    assert not failed, failed


def test_prefilter_changes_nothing(outcomes):
    variants = list(D.variants(set(RULES)))
    assert len(variants) == len(outcomes)
    for (name, fx, files, _), o in zip(variants, outcomes):
        assert (name, fx.name) == (o.rewrite, o.fixture)
        assert D.lint(files, fx.rule, prefilter=False) == o.sites, (name, fx.name)


def test_outcome_judges_the_site():
    o = D.Outcome("x", "f", "IC005", True, sites=[("drafter.py", 3)], expected={("drafter.py", 9)})
    assert not o.ok
    assert D.Outcome("x", "f", "IC005", True, sites=[("drafter.py", 9)], expected={("drafter.py", 9)}).ok
    assert not D.Outcome("x", "f", "IC004", False, sites=[("drafter.py", 9)]).ok
