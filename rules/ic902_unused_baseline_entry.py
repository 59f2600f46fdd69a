"""IC902: a baseline entry that matches no finding (reported while a baseline is applied)."""

from __future__ import annotations

from invariant_check.api.rule import Rule
from invariant_check.api.types import Invalid, Valid

BASELINE = "ic-baseline.json"
# The finding every example's code holds (IC003: a class with `set_skip_topk` and no compaction).
_CODE = """
import torch.nn as nn

class Predictor(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip
"""


def _baseline(*entries: str) -> str:
    body = ",\n".join(f"    {e}" for e in entries)
    return '{\n  "version": 1,\n  "entries": [\n' + body + "\n  ]\n}\n"


_ENTRY = '{"path": "example.py", "rule": "IC003", "function": "Predictor", "statement": "class Predictor(nn.Module):", "count": 1}'


class UnusedBaselineEntry(Rule):
    """
    ## What it does
    Flags an entry of the baseline file (`lint --baseline FILE`, or `baseline = "..."` in the
    configuration) that matches no finding any more: the finding it recorded was fixed, or its
    function or statement changed. It is reported at the entry's line in the baseline file. An
    entry with a count (the same finding twice in a function) is reported when fewer findings
    match than it counts.

    Only entries within the run's reach are checked: their file was linted (or is missing
    under a folder that was) and their rule is on. A pre-commit batch, or
    `invariant-check lint one_file.py`, says nothing about the other files' entries.

    On whenever a baseline is in use; `ignore = ["IC902"]` (or `--ignore IC902`) turns it off.
    `invariant-check lint --write-baseline FILE` rewrites the file without the unused entries
    (keeping the entries of files the run did not lint).

    ## Why is this bad?
    A baseline entry is a finding accepted once. When the code it describes is fixed, the entry
    stays behind as a fingerprint that silently accepts the same bug if it comes back in that
    function: the baseline should only ever shrink.

    ## Example
    ```json
    {"path": "vllm/spec_decode/mtp.py", "rule": "IC003", "function": "MTP", "statement": "class MTP(nn.Module):", "count": 1}
    ```
    after `MTP` gained its `compact_topk_indices`.

    ## Use instead
    Remove the entry: `invariant-check lint --write-baseline ic-baseline.json vllm/`.

    ## Fix
    None through `--fix`: the entry is in the baseline file, not in the code. Rerun
    `--write-baseline` over the same paths to drop the entries that match nothing.

    ## Options
    None.
    """

    CODE = "IC902"
    NAME = "unused-baseline-entry"
    SUMMARY = "A baseline entry that matches no finding any more (only with a baseline)."
    # `{baseline}`: the baseline file in use, as the finding shows it (filled in by the engine)
    HINT = "Remove the entry: rerun `invariant-check lint --write-baseline {baseline}` over the same paths."
    # Reported while a baseline is applied; it never visits syntax trees.
    EMITTED_BY_ENGINE = True
    TRIGGERS = ()
    # Its examples are a tree and a baseline file (`files`), and it reports in that file.
    EXAMPLE_REPORTED_IN = BASELINE

    VALID = [
        # the entry matches the finding: nothing is reported, not even the finding
        Valid(_CODE, files={BASELINE: _baseline(_ENTRY)}),
        # the finding moved down and its class was reformatted: still matched
        Valid("\n\n# a comment above\n" + _CODE.replace("(nn.Module)", "( nn.Module )"), files={BASELINE: _baseline(_ENTRY)}),
        # an entry of a rule that is not on in the run may be used by a full run
        Valid(_CODE, files={BASELINE: _baseline(_ENTRY, _ENTRY.replace("IC003", "IC001"))}),
    ]
    INVALID = [
        # the class was renamed: its entry matches nothing
        Invalid(_CODE.replace("Predictor", "DraftPredictor"), line=4, files={BASELINE: _baseline(_ENTRY)},
                message_contains="IC003 in `Predictor` of example.py"),
        # counted twice, found once
        Invalid(_CODE, line=4, files={BASELINE: _baseline(_ENTRY.replace('"count": 1', '"count": 2'))},
                message_contains="1 of 2 no longer found"),
    ]

    @classmethod
    def run_example(cls, example, root, *, prefilter=True):
        """Lints the example with IC003 (and this rule), applies the baseline of `files`, and
        returns this rule's findings (in the baseline file)."""
        from pathlib import Path

        from invariant_check.adoption.baseline import Fingerprints, Scope, apply, load
        from invariant_check.lint.engine import Engine
        from invariant_check.api.registry import all_rules
        from invariant_check.testing import write_example

        write_example(root, example)
        rule = all_rules()["IC003"]
        engine = Engine([rule, cls], {"IC003": rule.default_options(), cls.CODE: {}}, prefilter=prefilter,
                        jobs=1, root=root, cwd=root)
        files = sorted(root.rglob("*.py"))
        result = engine.lint(files)
        if result.errors:
            raise AssertionError(f"example did not lint cleanly: {result.errors}")
        base = load(Path(root) / BASELINE)
        scope = Scope({str(f) for f in files}, [str(root)], {"IC003", cls.CODE})
        applied = apply(result.findings, base, Fingerprints(Path(root)), scope, BASELINE, True)
        others = [f for f in applied.findings if f.rule != cls.CODE]
        if others and not any(f.rule == cls.CODE for f in applied.findings) and example in cls.VALID:
            raise AssertionError(f"the baseline did not hold back {others}")
        return [f for f in applied.findings if f.rule == cls.CODE]
