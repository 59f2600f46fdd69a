"""The prefilter and the result cache are optimisations: they must never change findings.

Every test compares runs of the real CLI on the same tree: default (prefilter + cache), cold and
warm; `--no-cache`; `--no-prefilter`; both off. The tree has findings in several files, a
cross-file base class with the compaction (in a file that only a fact trigger reaches), and base
classes without it in files that hold no trigger substring at all (only the cross-file expansion
reaches them: if it missed them, two findings would vanish).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ic_support import (
    EXPECTED_FLAGGED,
    RULE,
    TREE,
    assert_no_traceback,
    clean_env,
    run_cli,
    write_tree,
)

from invariant_check.lint.cache import Cache, config_key
from invariant_check.lint.engine import Engine
from invariant_check.api.registry import all_rules


def lint(tree: Path, *args: str) -> dict:
    run = run_cli("lint", "--format", "json", "--jobs", "1", *args, ".", cwd=tree)
    assert_no_traceback(run)
    assert run.code in (0, 1), run.err
    return json.loads(run.out)


def modes(tree: Path, *args: str) -> dict[str, dict]:
    """The same lint in every mode; the cache ones twice (cold, then warm)."""
    out = {}
    out["cached-cold"] = lint(tree, *args)
    out["cached-warm"] = lint(tree, *args)
    out["no-cache"] = lint(tree, "--no-cache", *args)
    out["no-prefilter"] = lint(tree, "--no-cache", "--no-prefilter", *args)
    out["no-prefilter-cached"] = lint(tree, "--no-prefilter", *args)
    out["no-prefilter-warm"] = lint(tree, "--no-prefilter", *args)
    return out


def assert_same(results: dict[str, dict]) -> list[dict]:
    reference = results["no-prefilter"]["findings"]
    for name, doc in results.items():
        assert doc["findings"] == reference, f"{name} differs from a full parse without cache"
        assert doc["errors"] == results["no-prefilter"]["errors"], name
    return reference


@pytest.fixture
def tree(tmp_path):
    return write_tree(tmp_path)


def test_same_findings_in_every_mode(tree):
    results = modes(tree, "--select", RULE)
    found = assert_same(results)
    assert {f["path"] for f in found} == EXPECTED_FLAGGED
    # and the optimisations were really in play: the prefilter skipped files, the warm run
    # parsed nothing
    assert results["no-cache"]["summary"]["files_parsed"] < results["no-prefilter"]["summary"]["files_parsed"]
    assert results["cached-warm"]["summary"]["files_parsed"] == 0
    assert results["no-prefilter-warm"]["summary"]["files_parsed"] == 0


def test_same_findings_with_every_rule(tree):
    # the other rules' prefilters and facts run too; none may disturb the others' findings
    assert_same(modes(tree))


def test_edit_invalidates_by_content(tree):
    first = lint(tree, "--select", RULE)
    assert "pkg/good.py" not in {f["path"] for f in first["findings"]}
    # the base loses its compaction: good.py becomes a finding though good.py itself is unchanged
    base = tree / "pkg" / "base.py"
    base.write_text(base.read_text().replace("compact_topk_indices", "compact_other"))
    after = modes(tree, "--select", RULE)
    found = assert_same(after)
    assert "pkg/good.py" in {f["path"] for f in found}


def test_stat_memo_never_hides_an_edit(tree):
    # Files older than the memo's safety window are memoised by (size, mtime); newer ones
    # (here: a future mtime, as a coarse clock or a racing editor would leave) are re-hashed.
    # All mtimes are set explicitly, so nothing depends on how fast the runs are.
    import time

    old = time.time_ns() - 1000 * 10**9
    for path in tree.rglob("*.py"):
        os.utime(path, ns=(old, old))
    lint(tree, "--select", RULE)
    bad = tree / "pkg" / "bad.py"
    text = bad.read_text()
    # same size, new mtime: the memo no longer matches
    bad.write_text(text.replace("class Bad(", "class Bax("))
    racy = time.time_ns() + 3600 * 10**9
    os.utime(bad, ns=(racy, racy))
    assert any("`Bax`" in f["message"] for f in lint(tree, "--select", RULE)["findings"])
    # same size and the very same (recent) mtime: only re-hashing can see this edit
    bad.write_text(text.replace("class Bad(", "class Bay("))
    os.utime(bad, ns=(racy, racy))
    found = lint(tree, "--select", RULE)["findings"]
    assert any("`Bay`" in f["message"] for f in found)
    assert found == lint(tree, "--select", RULE, "--no-cache")["findings"]


def test_new_and_deleted_files(tree):
    lint(tree, "--select", RULE)
    (tree / "pkg" / "many" / "m0.py").unlink()
    (tree / "pkg" / "new.py").write_text((tree / "pkg" / "bad.py").read_text().replace("Bad", "New"))
    results = modes(tree, "--select", RULE)
    found = {f["path"] for f in assert_same(results)}
    assert "pkg/many/m0.py" not in found and "pkg/new.py" in found


def test_option_change_changes_the_cache_key(tree):
    cache_dir = tree / ".invariant-check-cache"
    default = lint(tree, "--select", RULE)
    keys_before = {p.name for p in cache_dir.glob("*.json")}
    (tree / "pkg" / "alt.py").write_text(
        "import torch.nn as nn\n\nclass Alt(nn.Module):\n    def use_shared(self, on):\n        self.on = on\n"
    )
    (tree / "pyproject.toml").write_text('[tool.invariant-check.options.IC003]\nswitch-method = "use_shared"\n')
    results = modes(tree, "--select", RULE)
    found = {f["path"] for f in assert_same(results)}
    assert found == {"pkg/alt.py"}  # the old switch method is no longer flagged
    keys_after = {p.name for p in cache_dir.glob("*.json")}
    assert keys_after - keys_before, "an option change must use a new cache file"
    # back to the defaults: the old cache is valid again and gives the old findings
    (tree / "pyproject.toml").unlink()
    again = lint(tree, "--select", RULE)
    assert again["findings"] == lint(tree, "--select", RULE, "--no-cache")["findings"]
    assert {f["path"] for f in again["findings"]} == {f["path"] for f in default["findings"]}


def test_rule_selection_changes_the_cache_key():
    opts = {c: r.default_options() for c, r in all_rules().items()}
    assert config_key([RULE], {RULE: opts[RULE]}) != config_key(list(opts), opts)
    changed = dict(opts[RULE], **{"switch-method": "x"})
    assert config_key([RULE], {RULE: opts[RULE]}) != config_key([RULE], {RULE: changed})


def test_identical_files_keep_their_own_paths(tmp_path):
    # two files with the same bytes share a content hash; a warm run must still report each
    body = TREE["pkg/bad.py"]
    tree = write_tree(tmp_path, {"a/one.py": body, "b/two.py": body})
    cold = lint(tree, "--select", RULE)
    warm = lint(tree, "--select", RULE)
    assert {f["path"] for f in cold["findings"]} == {"a/one.py", "b/two.py"}
    assert warm["findings"] == cold["findings"]
    assert warm["summary"]["files_parsed"] == 0


def _cache_files(tree: Path) -> tuple[Path, list[Path]]:
    """(the results file, the facts files) of the tree's cache folder."""
    folder = tree / ".invariant-check-cache"
    results = sorted(folder.glob("*.json"))
    facts = sorted(folder.glob("facts-*/*.json"))
    assert len(results) == 1 and facts, sorted(folder.rglob("*"))
    return results[0], facts


def test_damaged_cache_is_ignored(tree):
    reference = lint(tree, "--select", RULE, "--no-cache")["findings"]
    lint(tree, "--select", RULE)
    cache_file, facts_files = _cache_files(tree)
    for damage in ("{not json", "[]", '{"format": 4, "stat": [], "files": 3}',
                   '{"format": 4, "stat": {}, "files": {"x": 5}, "results": {"y": 3}, "words": {}}'):
        cache_file.write_text(damage)
        for facts_file in facts_files:
            facts_file.write_text(damage)
        assert lint(tree, "--select", RULE)["findings"] == reference, damage
    # entries of the right outer shape but wrong inner shape
    data = json.loads(cache_file.read_text())
    for per_path in data["results"].values():
        for path in per_path:
            per_path[path] = {"candidates": [[1, 2]], "deps": 3}
    for d in data["files"]:
        data["files"][d] = [1]
    cache_file.write_text(json.dumps(data))
    for facts_file in facts_files:
        facts_file.write_text(json.dumps({"0:head": {"functions": 3}}))
    assert lint(tree, "--select", RULE)["findings"] == reference


def test_cache_from_another_folder_is_not_confused(tree, tmp_path_factory):
    # the same tree seen from another current folder has other display paths
    shared = tmp_path_factory.mktemp("shared-cache")
    env = clean_env(INVARIANT_CHECK_CACHE_DIR=str(shared))
    top = run_cli("lint", "--select", RULE, "--format", "json", ".", cwd=tree, env=env)
    inner = run_cli("lint", "--select", RULE, "--format", "json", ".", cwd=tree / "pkg", env=env)
    top_paths = {f["path"] for f in json.loads(top.out)["findings"]}
    inner_paths = {f["path"] for f in json.loads(inner.out)["findings"]}
    assert inner_paths == {p.removeprefix("pkg/") for p in top_paths}


# -- the engine alone: prefilter on/off over the rules' own examples ------------------------------


def _engine(tmp: Path, *, prefilter: bool, cache: Cache | None = None) -> Engine:
    rules = list(all_rules().values())
    options = {r.CODE: r.default_options() for r in rules}
    return Engine(rules, options, prefilter=prefilter, jobs=1, cache=cache, root=tmp, cwd=tmp)


def test_engine_prefilter_equivalence_on_all_rule_examples(tmp_path):
    # every rule's examples in one tree: rules see each other's files, as on a real checkout
    tree = {}
    for code, rule in all_rules().items():
        for kind, examples in (("valid", rule.VALID), ("invalid", rule.INVALID)):
            for i, ex in enumerate(examples):
                if ex.options:
                    continue  # options differ per example; the tree runs with defaults
                folder = f"{code}_{kind}_{i}"
                tree[f"{folder}/example.py"] = ex.code
                for name, body in ex.files.items():
                    tree[f"{folder}/{name}"] = body
    write_tree(tmp_path, tree)
    files = sorted(tmp_path.rglob("*.py"))
    full = _engine(tmp_path, prefilter=False).lint(files)
    assert not full.errors
    filtered = _engine(tmp_path, prefilter=True).lint(files)
    cache = Cache(tmp_path / "cache", "k")
    cached_cold = _engine(tmp_path, prefilter=True, cache=cache).lint(files)
    warm_cache = Cache(tmp_path / "cache", "k")
    warm_cache.load()
    cached_warm = _engine(tmp_path, prefilter=True, cache=warm_cache).lint(files)
    assert filtered.findings == full.findings
    assert cached_cold.findings == full.findings
    assert cached_warm.findings == full.findings
    assert cached_warm.files_parsed == 0
    assert full.findings, "the invalid examples must produce findings"


def test_large_tree_same_findings_serial_and_parallel(tmp_path):
    # Past a size threshold the engine also scans and prefilters in worker processes; the
    # findings must not depend on that, cold or warm, with or without the prefilter.
    from invariant_check.lint import engine as engine_mod

    filler = getattr(engine_mod, "PARALLEL_SCAN_MIN_FILES", 400) + 20
    tree = dict(TREE)
    for i in range(filler):
        tree[f"filler/f{i // 50}/mod{i}.py"] = f"def f{i}(x):\n    return x + {i}\n"
    write_tree(tmp_path, tree)
    serial = lint(tmp_path, "--select", RULE, "--no-cache")  # lint() passes --jobs 1

    def parallel(*args: str) -> dict:
        run = run_cli("lint", "--format", "json", "--select", RULE, "--jobs", "2", *args, ".", cwd=tmp_path)
        assert_no_traceback(run)
        return json.loads(run.out)

    runs = {
        "parallel-no-cache": parallel("--no-cache"),
        "parallel-cold": parallel(),
        "parallel-warm": parallel(),
        "parallel-no-prefilter": parallel("--no-cache", "--no-prefilter"),
    }
    assert {f["path"] for f in serial["findings"]} == EXPECTED_FLAGGED
    for name, doc in runs.items():
        assert doc["findings"] == serial["findings"], name
        assert doc["summary"]["files_checked"] == serial["summary"]["files_checked"], name
    assert runs["parallel-warm"]["summary"]["files_parsed"] == 0


def test_partial_run_keeps_the_rest_of_the_cache(tree):
    # pre-commit lints only the changed files; that must not throw away the warm cache of the
    # whole tree. Files are aged so that the stat memo trusts them (as in a real checkout).
    import time

    old = time.time_ns() - 1000 * 10**9
    for path in tree.rglob("*.py"):
        os.utime(path, ns=(old, old))
    full = lint(tree, "--select", RULE)
    assert lint(tree, "--select", RULE)["summary"]["files_parsed"] == 0
    (tree / "pkg" / "bad.py").write_text((tree / "pkg" / "bad.py").read_text() + "\n# edited\n")
    run = run_cli("lint", "--select", RULE, "--jobs", "1", "pkg/bad.py", cwd=tree)
    assert run.code == 1
    again = lint(tree, "--select", RULE)
    assert again["findings"] == full["findings"]
    assert again["summary"]["files_parsed"] <= 1  # at most the edited file, not the tree


def test_deleted_files_leave_the_cache(tree):
    import time

    old = time.time_ns() - 1000 * 10**9
    for path in tree.rglob("*.py"):
        os.utime(path, ns=(old, old))
    lint(tree, "--select", RULE)
    cache_file, _ = _cache_files(tree)
    assert str(tree / "pkg" / "many" / "m3.py") in json.loads(cache_file.read_text())["stat"]
    (tree / "pkg" / "many" / "m3.py").unlink()
    (tree / "pkg" / "touch.py").write_text("x = 1\n")  # something new, so the run saves
    lint(tree, "--select", RULE)
    stat = json.loads(cache_file.read_text())["stat"]
    assert str(tree / "pkg" / "many" / "m3.py") not in stat
    assert str(tree / "pkg" / "many" / "m2.py") in stat


def test_the_comparison_has_teeth(tmp_path):
    # A test-only rule whose trigger does not cover what it reports: the prefilter then hides
    # a finding, and comparing against --no-prefilter is what exposes it.
    from invariant_check.analysis.needs import Words
    from invariant_check.api.rule import Report, Rule

    class Leaky(Rule):
        CODE = "IC991"
        NAME = "leaky"
        SCOPE = "class"

        @classmethod
        def needs(cls, options):
            return Words("never_present_anywhere")

        def check_class(self, view):
            yield Report(view.node, "class")

    write_tree(tmp_path, {"a.py": "class A:\n    pass\n"})
    files = [tmp_path / "a.py"]
    on = Engine([Leaky], {"IC991": {}}, prefilter=True, jobs=1, root=tmp_path, cwd=tmp_path).lint(files)
    off = Engine([Leaky], {"IC991": {}}, prefilter=False, jobs=1, root=tmp_path, cwd=tmp_path).lint(files)
    assert on.findings != off.findings
