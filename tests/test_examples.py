"""The example tree the README's first command lints (one finding per rule, each in its own file,
nothing in the clean file), and that command itself, run as written in a copy of the checkout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from invariant_check.api.registry import all_rules

REPO = Path(__file__).resolve().parent.parent
# The console script of the environment running the tests (`python -m` from the checkout would
# import the source folder instead of the installed package).
EXE = Path(sys.executable).parent / "invariant-check"


def readme_commands() -> list[str]:
    """The commands of the README's first code block, comments and blank lines dropped."""
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_examples_show_each_rule_once_and_a_clean_file():
    proc = subprocess.run(
        [str(EXE), "lint", "--no-cache", "--format", "json", "examples"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["errors"] == []
    got = sorted((f["rule"], Path(f["path"]).name) for f in doc["findings"])
    # Every analysis rule once (IC9xx are about suppression comments, which the examples lack),
    # each in a file of its own; a new rule needs an example file here.
    analysis_rules = sorted(code for code in all_rules() if code < "IC900")
    assert [rule for rule, _ in got] == analysis_rules, got
    assert len({name for _, name in got}) == len(got), got
    assert ("IC001", "drafter_last_entry.py") in got and ("IC002", "proposer_skip_topk.py") in got
    assert ("IC003", "mtp_model.py") in got and ("IC006", "group_loop_advance.py") in got
    assert "clean_proposer.py" not in {name for _, name in got}
    assert doc["summary"]["files_checked"] == len(list((REPO / "examples").glob("*.py")))


def test_readme_opens_with_the_lint_command_and_the_test_command():
    commands = readme_commands()
    assert len(commands) == 2, commands
    assert "invariant-check lint examples/" in commands[0]
    assert commands[1] == "bash scripts/test"


@pytest.mark.slow
def test_readme_lint_command_works_as_written_in_a_fresh_checkout(tmp_path, copy_project):
    """Builds a virtualenv and installs the project into it, exactly as the README says."""
    src = copy_project(tmp_path / "checkout")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["NO_COLOR"] = "1"
    # `python3` as the reader's shell finds it, but never the test venv's own interpreter.
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != Path(sys.executable).parent.resolve())
    proc = subprocess.run(["bash", "-c", readme_commands()[0]], cwd=src, env=env,
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # findings, as the README's comment says
    flagged = sorted(set(re.findall(r"^examples/(\w+\.py):\d+:\d+: (IC\d{3}) ", proc.stdout, re.M)))
    assert flagged == [("draft_step_max_seq_len.py", "IC004"), ("drafter_last_entry.py", "IC001"),
                       ("group_loop_advance.py", "IC006"), ("mtp_model.py", "IC003"), ("proposer_skip_topk.py", "IC002"),
                       ("v2_draft_loop.py", "IC005")], out
    assert (src / ".venv-lint" / "bin" / "invariant-check").is_file()
