"""bench/real_trees.py and its list: the list is well formed, and the script, run for real on a
tiny tree of its own (one expected finding) and on absent trees, reports and exits as documented."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from invariant_check.api.registry import all_rules

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "real_trees.py"
LIST = ROOT / "bench" / "real_trees.json"

# Our own code: per-group metadata built in a loop, only the last group validated, every group
# returned (IC001 at the `isinstance` line, 8).
TOY = '''\
class ToyDrafter:
    def metadata_per_layer(self, groups):
        per_layer = {}
        for group in groups:
            attn_metadata = group.builder.build_for_drafting(draft_index=0)
            for name in group.layer_names:
                per_layer[name] = attn_metadata
        if not isinstance(attn_metadata, self.supported_types):
            raise TypeError(f"unsupported metadata: {type(attn_metadata)}")
        return per_layer
'''
TOY_COMMIT = "1" * 40
GONE_COMMIT = "2" * 40


def _script_module():
    spec = importlib.util.spec_from_file_location("real_trees", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_list_is_well_formed():
    raw = LIST.read_text()
    assert raw.endswith("\n")
    trees = _script_module().load_trees(LIST)  # raises on any bad entry
    assert len(trees) >= 20
    rules = set(all_rules())
    for tree in trees:
        assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", tree["repository"]), tree["name"]
        for exp in tree["expected"]:
            assert exp["rule"] in rules and exp["rule"] < "IC900", exp
            assert exp["path"].endswith(".py"), exp
            assert len(exp["reason"]) <= 300, exp
    # the same tree is never listed twice at one commit
    assert len({(t["repository"], t["commit"]) for t in trees}) == len(trees)
    # what docs/accuracy.md lists is what the script expects
    doc = (ROOT / "docs" / "accuracy.md").read_text()
    section = doc.split("## Other engines, plugins and forks", 1)[1]
    for tree in trees:
        assert tree["commit"][:12] in section, tree["name"]
        for exp in tree["expected"]:
            assert f"{exp['path']}:{exp['line']}" in section and exp["verdict"] in section, exp


def _write_list(tmp_path: Path, toy_expected: list[dict], names=("toy", "gone")) -> Path:
    trees = {
        "toy": {"name": "toy", "repository": "https://github.com/example/toy", "commit": TOY_COMMIT,
                "spec_paths": ["drafting"], "expected": toy_expected},
        "gone": {"name": "gone", "repository": "https://github.com/example/gone", "commit": GONE_COMMIT,
                 "spec_paths": ["src"], "expected": []},
    }
    path = tmp_path / "trees.json"
    path.write_text(json.dumps({"trees": [trees[n] for n in names]}))
    return path


def _toy_tree(trees_dir: Path) -> Path:
    toy = trees_dir / "toy"
    (toy / "drafting").mkdir(parents=True)
    (toy / "drafting" / "drafter.py").write_text(TOY)
    (toy / "setup_helpers.py").write_text("def version():\n    return '0.0.1'\n")
    return toy


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def _row(out: str, tree: str) -> list[str]:
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if cells[0] == tree:
            return cells
    raise AssertionError(f"no row for {tree!r} in:\n{out}")


IC001 = {"rule": "IC001", "path": "drafting/drafter.py", "verdict": "real", "reason": "our fixture"}


def test_a_tiny_tree_is_linted_for_real_and_an_absent_one_is_listed(tmp_path):
    trees_dir = tmp_path / "trees"
    _toy_tree(trees_dir)
    expected = _write_list(tmp_path, [dict(IC001, line=8)])
    proc = _run("--trees", str(trees_dir), "--expected", str(expected), "--spec")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    # tree, commit, files (checked / parsed), time, expected found, other findings, errors
    whole = _row(out, "toy")
    assert whole[1] == TOY_COMMIT[:12] and whole[2].startswith("2 / ") and whole[3].endswith(" s")
    assert whole[4:7] == ["1/1", "0", "0"]
    assert _row(out, "toy, spec paths")[2].startswith("1 / ") and _row(out, "toy, spec paths")[4:7] == ["1/1", "0", "0"]
    assert _row(out, "gone")[2] == "absent"
    gone = trees_dir / "gone"
    assert f"git clone https://github.com/example/gone {gone} && git -C {gone} checkout {GONE_COMMIT}" in out
    assert "found IC001 drafting/drafter.py:8, real" in out
    assert "RESULT: PASS (1 tree linted, 1 absent)" in out


def test_a_finding_off_the_listed_line_is_a_miss_and_another_finding(tmp_path):
    trees_dir = tmp_path / "trees"
    _toy_tree(trees_dir)
    # within the tolerance it still counts, with the line it moved from
    near = _run("--trees", str(trees_dir), "--expected", str(_write_list(tmp_path, [dict(IC001, line=6)], ["toy"])))
    assert near.returncode == 0, near.stdout + near.stderr
    assert "found IC001 drafting/drafter.py:8 (listed at line 6), real" in near.stdout
    # beyond it, the listed finding is missed and the real one is a false positive
    far = _run("--trees", str(trees_dir), "--expected", str(_write_list(tmp_path, [dict(IC001, line=2)], ["toy"])),
               "--line-tolerance", "3")
    assert far.returncode == 1, far.stdout + far.stderr
    assert _row(far.stdout, "toy")[4:7] == ["0/1", "1", "0"]
    assert "MISSING IC001 drafting/drafter.py:2 (real)" in far.stdout
    assert "OTHER IC001 drafting/drafter.py:8: " in far.stdout
    assert "RESULT: FAIL" in far.stdout


def test_nothing_present_exits_2_and_a_bad_list_is_one_line(tmp_path):
    proc = _run("--trees", str(tmp_path / "none"), "--expected", str(_write_list(tmp_path, [])))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert _row(proc.stdout, "toy")[2] == "absent" and "RESULT: NOTHING TO CHECK" in proc.stdout

    bad = json.loads(_write_list(tmp_path, [dict(IC001, line=8, verdict="maybe")]).read_text())
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    proc = _run("--trees", str(tmp_path), "--expected", str(tmp_path / "bad.json"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "tree toy: expected[0]: `verdict`" in proc.stderr, proc.stderr


@pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True).returncode != 0, reason="needs git")
def test_a_checkout_at_another_commit_fails(tmp_path):
    trees_dir = tmp_path / "trees"
    toy = _toy_tree(trees_dir)
    git = ["git", "-C", str(toy), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "toy"]):
        subprocess.run([*git, *cmd], check=True, capture_output=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    proc = _run("--trees", str(trees_dir), "--expected", str(_write_list(tmp_path, [dict(IC001, line=8)], ["toy"])))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"toy: CHECKOUT at {head}, not the listed {TOY_COMMIT}" in proc.stdout
