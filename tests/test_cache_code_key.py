"""The cache key covers the code that decides findings: after a rule's source is edited, a
warm cache must not serve the old rule's findings (before, only a version bump did that).

The package is copied to a temporary folder and run from there, so that its source can be
edited without touching the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROGRAM = """\
class MultiTokenPredictor:
    def set_skip_topk(self, skip: bool) -> None:
        self.skip = skip
"""


def _copy_package(dest: Path) -> Path:
    import invariant_check

    pkg = Path(invariant_check.__file__).resolve().parent
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(pkg, dest / "invariant_check", ignore=ignore)
    rules_dir = dest / "invariant_check" / "rules"
    if not (rules_dir / "ic003_reuse_mode_without_compaction_method.py").exists():
        # a checkout (editable install): rules/ lives beside the package
        shutil.rmtree(rules_dir, ignore_errors=True)
        shutil.copytree(REPO / "rules", rules_dir, ignore=ignore)
    return rules_dir / "ic003_reuse_mode_without_compaction_method.py"


def _lint(code_dir: Path, project: Path, cache: Path) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(code_dir), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-c", "from invariant_check.cli.commands import main; main()", "lint", "--format", "json",
         "--cache-dir", str(cache), "mtp.py"],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    return json.loads(proc.stdout)["findings"]


def test_an_edited_rule_is_not_served_from_the_cache(tmp_path):
    code_dir = tmp_path / "code"
    rule_file = _copy_package(code_dir)
    check = subprocess.run(
        [sys.executable, "-c", "import invariant_check; print(invariant_check.__file__)"],
        env=dict(os.environ, PYTHONPATH=str(code_dir)), capture_output=True, text=True, cwd=tmp_path,
    )
    assert check.stdout.strip().startswith(str(code_dir)), check.stdout
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[tool.invariant-check]\n")
    (project / "mtp.py").write_text(PROGRAM)
    cache = tmp_path / "cache"

    first = _lint(code_dir, project, cache)
    assert [f["rule"] for f in first] == ["IC003"]
    assert "EDITED" not in first[0]["message"]

    source = rule_file.read_text()
    assert "but neither it nor a base class has" in source
    rule_file.write_text(source.replace("but neither it nor a base class has", "but EDITED has no"))

    second = _lint(code_dir, project, cache)
    assert [f["rule"] for f in second] == ["IC003"]
    assert "EDITED" in second[0]["message"], "the cache served the finding of the rule before the edit"
