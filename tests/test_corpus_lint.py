"""Every Python file of every vLLM release in `../shared/corpus`, linted by the real command
with every rule: no rule may fail on any of them (issue 22). A rule that raises shows as an
error naming it (`"rule"` in the JSON report); syntax errors and unreadable files would show
too, and there are none in a release.

Each release takes tens of seconds on a 2-core machine: `slow`. Skips, saying why, where the
corpus is absent (CI has it).
"""

from __future__ import annotations

import json

import pytest
from ic_corpus import release_versions
from ic_support import clean_env, corpus_dir, run_cli

CORPUS = corpus_dir()

RELEASES = [f"vllm-{v}" for v in release_versions()]


@pytest.mark.slow
@pytest.mark.skipif(not RELEASES, reason=f"needs the vLLM release corpus at {CORPUS}")
@pytest.mark.parametrize("release", RELEASES)
def test_no_rule_fails_on_any_file_of_a_release(release, release_tree, tmp_path):
    tree = release_tree(release)
    report = tmp_path / "report.json"
    run = run_cli(
        "lint", "--no-cache", "--exit-zero", "-q", "--format", "json", "--output", str(report), "vllm",
        cwd=tree, env=clean_env(), timeout=900,
    )
    assert run.code == 0, run.err
    assert "Traceback" not in run.err
    doc = json.loads(report.read_text())
    assert doc["errors"] == [], "\n".join(f"{e['path']}:{e.get('line')}: {e['message']}" for e in doc["errors"])
    # the whole tree was linted: every .py file of the release checked
    assert doc["summary"]["files_checked"] == sum(1 for _ in (tree / "vllm").rglob("*.py"))
