"""Mutation report for IC001/IC002: detection and false-alarm rate per rewrite.

    .venv/bin/python bench/mutation_report.py [--rule IC002] [--failures]

Exits 1 unless detection is 100% and false alarms 0% on every row; tests/test_mutations.py
asserts the same numbers.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load():
    path = ROOT / "tests" / "mutation_fixtures" / "mutations.py"
    spec = importlib.util.spec_from_file_location("mutations", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutations"] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rule", action="append", help="IC001 or IC002 (default: both)")
    parser.add_argument("--failures", action="store_true", help="list every failing variant")
    args = parser.parse_args(argv)
    M = _load()
    outcomes = M.run(set(args.rule) if args.rule else None)
    rows = M.table(outcomes)
    print(M.format_table(rows))
    bad = [o for o in outcomes if not o.ok]
    if args.failures:
        for o in bad:
            want = (o.expected_lines or "any line") if o.expect_report else "no finding"
            print(f"FAIL {o.rule} {o.rewrite} on {o.fixture}: reported {o.lines}, wanted {want}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
