"""IC004 on a `replace(...)` that advances `seq_lens` (vLLM's `extend_all_queries_by_N`): the
hint names the upper bound and is a keyword argument that compiles in that same call."""

from __future__ import annotations

import ast

from invariant_check.registry import all_rules
from invariant_check.testing import run_example

RULE = all_rules()["IC004"]
EXTEND = next(ex for ex in RULE.INVALID if "extend_all_queries_by_N" in ex.code)


def test_the_replace_hint_names_the_bound_and_compiles(tmp_path):
    (finding,) = [f for f in run_example(RULE, EXTEND, tmp_path) if f.line == EXTEND.line]
    assert "`seq_lens_cpu_upper_bound`" in finding.message
    keyword = "seq_lens_cpu_upper_bound=cad.seq_lens_cpu_upper_bound + N if cad.seq_lens_cpu_upper_bound is not None else None"
    assert keyword in finding.hint and "replace(...)" in finding.hint
    call = ast.parse(f"cad.replace(seq_lens=cad.seq_lens + N, {keyword})", mode="eval").body
    assert [k.arg for k in call.keywords] == ["seq_lens", "seq_lens_cpu_upper_bound"]
