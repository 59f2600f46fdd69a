"""Two runs that share a cache folder at the same time (pre-commit batches) keep each other's
results instead of the last writer erasing the other's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from invariant_check.lint.cache import Cache, ScanInfo, digest


def _old_file(path: Path, text: str) -> Path:
    path.write_text(text)
    past = time.time() - 60  # older than the stat memo's safety window
    os.utime(path, (past, past))
    return path


def test_parallel_saves_merge(tmp_path):
    a = _old_file(tmp_path / "a.py", "a = 1\n")
    b = _old_file(tmp_path / "b.py", "b = 2\n")
    cache_dir = tmp_path / "cache"
    first, second = Cache(cache_dir, "k"), Cache(cache_dir, "k")
    first.load()
    second.load()  # both start from the same (empty) file
    for cache, path in ((first, a), (second, b)):
        d = digest(path.read_bytes())
        cache.put_scan_info(d, ScanInfo(False, False, ()))
        cache.remember(str(path), os.stat(path), d)
    assert first.save({digest(a.read_bytes())}) is None
    assert second.save({digest(b.read_bytes())}) is None
    merged = Cache(cache_dir, "k")
    merged.load()
    assert set(merged.stat) == {str(a), str(b)}
    assert {digest(a.read_bytes()), digest(b.read_bytes())} <= set(merged.files)


def test_a_save_reads_the_disk_again_only_when_another_run_wrote_it(tmp_path, monkeypatch):
    """The merge is for runs that wrote meanwhile: a cache file still as this run read it is
    not read again (a one-file run spent a third of its cache time on that), one replaced
    since is (the other run's entries survive). Facts are read per digest, when asked."""
    import invariant_check.lint.cache as cache_mod

    a = _old_file(tmp_path / "a.py", "a = 1\n")
    b = _old_file(tmp_path / "b.py", "b = 2\n")
    da, db = digest(a.read_bytes()), digest(b.read_bytes())
    cache_dir = tmp_path / "cache"
    seed = Cache(cache_dir, "k")
    seed.load()
    seed.put_facts("seed", {"chunk": {"x": 1}})
    seed.put_scan_info("seed", ScanInfo(False, False, ()))
    assert seed.save({"seed"}, {"seed"}) is None
    reads: list[str] = []
    real = cache_mod._read_json
    monkeypatch.setattr(cache_mod, "_read_json", lambda path: (reads.append(path.name), real(path))[1])

    alone = Cache(cache_dir, "k")
    alone.load()
    alone.put_scan_info(da, ScanInfo(False, False, ()))
    alone.put_facts(da, {"chunk": {"y": 2}})
    assert alone.facts().get("seed") == {"chunk": {"x": 1}}
    assert reads == ["k.json", "seed.json"]  # the load, and the one digest asked about
    assert alone.save({da, "seed"}, {da, "seed"}) is None
    assert reads == ["k.json", "seed.json"]  # nothing more

    reads.clear()
    late, other = Cache(cache_dir, "k"), Cache(cache_dir, "k")
    late.load()
    assert late.facts().get(db) is None  # nothing yet
    other.load()
    other.put_scan_info(db, ScanInfo(False, False, ()))
    other.put_facts(db, {"chunk": {"z": 3}})
    assert other.save({da, db, "seed"}, {da, db, "seed"}) is None  # replaces the results file
    late.put_scan_info("late", ScanInfo(False, False, ()))
    late.put_facts(db, {"other-chunk": {"w": 4}})
    reads.clear()
    assert late.save({da, db, "seed", "late"}, {da, db, "seed"}) is None
    assert sorted(reads) == sorted(["k.json", f"{db}.json"])  # merged with the other's
    merged = Cache(cache_dir, "k")
    merged.load()
    assert {da, db, "late"} <= set(merged.files)
    assert {da, db, "seed"} == set(merged.facts())
    assert merged.facts()[db] == {"chunk": {"z": 3}, "other-chunk": {"w": 4}}


def test_cli_runs_on_parts_of_a_tree_keep_the_whole_cache(tmp_path):
    for name in ("x", "y"):
        (tmp_path / name).mkdir()
        _old_file(tmp_path / name / "m.py", "class P(nn.Module):\n    def set_skip_topk(self, s):\n        self.layer.skip_topk = s\n")
    cache_dir = tmp_path / "cache"
    cmd = [sys.executable, "-m", "invariant_check.cli.commands", "lint", "--format", "json", "--cache-dir", str(cache_dir)]
    procs = [subprocess.Popen([*cmd, part], cwd=tmp_path, stdout=subprocess.PIPE, text=True) for part in ("x", "y")]
    for p in procs:
        p.communicate()
        assert p.returncode == 1
    out = subprocess.run([*cmd, "."], cwd=tmp_path, capture_output=True, text=True)
    doc = json.loads(out.stdout)
    assert len(doc["findings"]) == 2
    assert doc["summary"]["files_parsed"] == 0  # both halves came from the cache


def test_facts_are_shared_by_caches_of_other_roots_and_kept_for_modules_read(tmp_path):
    """Facts live in one folder per code version, shared by the caches of every project root:
    saving one cache keeps the facts that another cache's files, or this run's reads (a
    module outside the linted paths), still point to."""
    cache_dir = tmp_path / "cache"
    tree = Cache(cache_dir, "tree")
    tree.load()
    a = _old_file(tmp_path / "a.py", "a = 1\n")
    da = digest(a.read_bytes())
    tree.remember(str(a), os.stat(a), da)
    tree.put_facts(da, {"chunk": {"x": 1}})
    assert tree.save({da}) is None

    one = Cache(cache_dir, "one-file")
    one.load()
    b = _old_file(tmp_path / "b.py", "b = 2\n")
    db = digest(b.read_bytes())
    one.remember(str(b), os.stat(b), db)
    one.put_facts(db, {"chunk": {"y": 2}})
    one.put_facts("outside", {"chunk": {"z": 3}})  # a module of the environment it read
    assert one.save({db}, {"outside"}) is None
    assert {f.stem for f in one.facts_folder.glob("*.json")} == {da, db, "outside"}

    # a later save that neither points to nor reads "outside" lets it go
    again = Cache(cache_dir, "one-file")
    again.load()
    again.put_facts(db, {"chunk": {"y": 2}})
    assert again.save({db}) is None
    assert {f.stem for f in again.facts_folder.glob("*.json")} == {da, db}
