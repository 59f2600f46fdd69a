"""Mutation report for IC001, IC002, IC004 and IC005: detection and false-alarm rate per rewrite.

    .venv/bin/python bench/mutation_report.py [--rule IC002] [--failures]

Exits 1 unless detection is 100% and false alarms 0% on every row (2 when there is nothing to
judge); tests/test_mutations.py
(IC001, IC002) and tests/test_draft_mutations.py (IC004, IC005) assert the same numbers.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "mutation_fixtures"


def _load(name: str = "mutations"):
    # the harnesses import each other by name (draft_mutations uses mutations' libcst helpers)
    if str(FIXTURES) not in sys.path:
        sys.path.insert(0, str(FIXTURES))
    path = ROOT / "tests" / "mutation_fixtures" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# which harness mutates which rule's fixtures
HARNESSES = {"mutations": {"IC001", "IC002"}, "draft_mutations": {"IC004", "IC005"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rule", action="append", help="IC001, IC002, IC004 or IC005 (default: all)")
    parser.add_argument("--failures", action="store_true", help="list every failing variant")
    args = parser.parse_args(argv)
    wanted = set(args.rule) if args.rule else set().union(*HARNESSES.values())
    outcomes = []
    for name, rules in HARNESSES.items():
        if not wanted & rules:
            continue
        M = _load(name)
        got = M.run(wanted & rules)
        outcomes.extend(got)
        print(M.format_table(M.table(got)) if hasattr(M, "table") else M.format_table(got))
        print()
    if not outcomes or not any(o.expect_report for o in outcomes) or not any(not o.expect_report for o in outcomes):
        # nothing was judged (an unknown --rule, a harness that built no variant): no verdict
        print(f"mutation_report: no buggy and clean variants to judge for {sorted(wanted)}", file=sys.stderr)
        return 2
    bad = [o for o in outcomes if not o.ok]
    if args.failures:
        for o in bad:
            print(f"FAIL {o.rule} {o.rewrite} on {o.fixture}: {_describe(o)}")
    print(f"{len(outcomes) - len(bad)} of {len(outcomes)} variants as expected" + (f", {len(bad)} FAILED" if bad else ""))
    return 1 if bad else 0


def _describe(o) -> str:
    """What a failing variant reported and what it should have, for either harness: IC001/IC002
    outcomes hold lines of the main module, IC004/IC005 ones (path, line) sites."""
    if hasattr(o, "sites"):
        got, expected = sorted(o.sites), sorted(o.expected)
    else:
        got, expected = o.lines, o.expected_lines
    want = (expected or "a finding") if o.expect_report else "no finding"
    return f"reported {got}, wanted {want}"


if __name__ == "__main__":
    raise SystemExit(main())
