"""One generic test runs every rule's VALID and INVALID examples (Fixit style)."""

from __future__ import annotations

import re

import pytest

from invariant_check.api.registry import all_rules
from invariant_check.testing import EXAMPLE_FILE, run_example

RULES = all_rules()
CASES = [
    pytest.param(rule, kind, i, ex, id=f"{code}-{kind}-{i}")
    for code, rule in RULES.items()
    for kind, examples in (("valid", rule.VALID), ("invalid", rule.INVALID))
    for i, ex in enumerate(examples)
]


def reported_in(rule) -> str:
    """The file an INVALID example's line refers to: the example's own, or the rule's
    (IC902 reports in the baseline file)."""
    return getattr(rule, "EXAMPLE_REPORTED_IN", None) or EXAMPLE_FILE


@pytest.mark.parametrize("rule,kind,index,example", CASES)
@pytest.mark.parametrize("prefilter", [True, False], ids=["prefilter", "no-prefilter"])
def test_example(rule, kind, index, example, prefilter, tmp_path):
    """Exact: a VALID example gives no finding in any file of its tree; an INVALID one gives
    exactly one, at its line, in its file (none in the other modules of its tree)."""
    findings = run_example(rule, example, tmp_path, prefilter=prefilter, every_file=True)
    if kind == "valid":
        assert findings == [], f"{rule.CODE} VALID[{index}] reported: {findings}"
        return
    got = [(f.path, f.line) for f in findings]
    assert got == [(reported_in(rule), example.line)], (
        f"{rule.CODE} INVALID[{index}]: expected one finding at {reported_in(rule)}:{example.line}, got {got}")
    f = findings[0]
    if example.column is not None:
        assert f.column == example.column
    if example.message_contains:
        assert example.message_contains in f.message
    assert f.rule == rule.CODE and f.name == rule.NAME
    assert f.hint, "every finding carries a fix hint"
    assert "\n" not in f.message, "messages are one line"


@pytest.mark.parametrize("code", list(RULES))
def test_rule_is_documented(code):
    rule = RULES[code]
    assert re.fullmatch(r"IC\d{3}", code)
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule.NAME)
    doc = rule.documentation()
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Options"):
        assert section in doc, f"{code} docstring lacks {section}"
    assert rule.SUMMARY and "\n" not in rule.SUMMARY
    assert rule.VALID and rule.INVALID, f"{code} needs VALID and INVALID examples"
    if not rule.EMITTED_BY_ENGINE:
        # the prefilter is derived from what the rule declares it needs: never "anything"
        from invariant_check.analysis.needs import Everything

        assert not isinstance(rule.needs(rule.default_options()), Everything), f"{code} declares no needs"


@pytest.mark.parametrize(
    "rule,example",
    [pytest.param(r, ex, id=f"{c}-invalid-{i}") for c, r in RULES.items() for i, ex in enumerate(r.INVALID)],
)
@pytest.mark.parametrize("newline", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_invalid_examples_with_other_line_endings(rule, example, newline, tmp_path):
    """The prefilters read lines: CRLF and lone-CR files must give the same findings."""
    import dataclasses
    import textwrap

    def convert(code: str) -> str:
        return textwrap.dedent(code).lstrip("\n").replace("\n", newline)

    converted = dataclasses.replace(
        example, code=convert(example.code), files={k: convert(v) for k, v in example.files.items()}
    )
    findings = run_example(rule, converted, tmp_path, prefilter=True, every_file=True)
    assert [(f.path, f.line) for f in findings] == [(reported_in(rule), example.line)]
