"""IC004 on a `replace(...)` that advances `seq_lens` (vLLM's `extend_all_queries_by_N`): the
hint names the upper bound and is a keyword argument that compiles in that same call."""

from __future__ import annotations

import ast

from invariant_check.fixing.fixes import apply_edits
from invariant_check.api.registry import all_rules
from invariant_check.testing import EXAMPLE_FILE, run_example

RULE = all_rules()["IC004"]
EXTEND = next(ex for ex in RULE.INVALID if "extend_all_queries_by_N" in ex.code)


def test_the_replace_hint_names_the_bound_and_compiles(tmp_path):
    (finding,) = [f for f in run_example(RULE, EXTEND, tmp_path) if f.line == EXTEND.line]
    assert "`seq_lens_cpu_upper_bound`" in finding.message
    # the hint is the fix: the keyword, in that same call, as --fix writes it
    assert "replace(...)" in finding.hint and "seq_lens_cpu_upper_bound=(" in finding.hint
    assert "cad.seq_lens_cpu_upper_bound + N" in finding.hint and "if cad.seq_lens_cpu_upper_bound is not None" in finding.hint
    fixed = apply_edits((tmp_path / EXAMPLE_FILE).read_bytes(), list(finding.fix.edits)).decode()
    (call,) = [n for n in ast.walk(ast.parse(fixed)) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "replace"]
    assert [k.arg for k in call.keywords][:1] == ["seq_lens"] and "seq_lens_cpu_upper_bound" in [k.arg for k in call.keywords]
