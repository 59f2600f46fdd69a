"""The example tree the README's first command lints: one finding per rule, each in its own
file, and nothing in the clean file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_examples_show_each_rule_once_and_a_clean_file():
    proc = subprocess.run(
        [sys.executable, "-m", "invariant_check.cli", "lint", "--no-cache", "--format", "json", "examples"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["errors"] == []
    got = sorted((f["rule"], Path(f["path"]).name) for f in doc["findings"])
    assert got == [
        ("IC001", "drafter_last_entry.py"),
        ("IC002", "proposer_skip_topk.py"),
        ("IC003", "mtp_model.py"),
    ]
    assert doc["summary"]["files_checked"] == len(list((REPO / "examples").glob("*.py")))
