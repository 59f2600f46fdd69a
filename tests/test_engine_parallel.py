"""The parallel path (large trees: scan, parse and analyse in forked workers) must give
exactly what the serial path gives, cold and from the cache."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from invariant_check.lint import engine as engine_mod

CLI = [sys.executable, "-m", "invariant_check.cli.commands"]

BUGGY_MODEL = """
import torch.nn as nn

class Predictor{n}(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip
"""
BUGGY_DRAFTER = """
def propose{n}(self, groups):
    for group in groups:
        attn_metadata = group.build()
    assert isinstance(attn_metadata, FlashAttentionMetadata)
"""
PLAIN = "def f{n}(x):\n    return x + {n}\n"


@pytest.fixture(scope="module")
def big_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("big")
    count = engine_mod.PARALLEL_MIN_FILES + 50
    for n in range(count):
        sub = root / f"pkg{n % 7}"
        sub.mkdir(exist_ok=True)
        if n % 97 == 0:
            body = BUGGY_MODEL.format(n=n)
        elif n % 89 == 0:
            body = BUGGY_DRAFTER.format(n=n)
        else:
            body = PLAIN.format(n=n)
        (sub / f"m{n}.py").write_text(body)
    (root / "pkg0" / "broken.py").write_text("def set_skip_topk(:\n")
    return root


def lint(root: Path, *args: str) -> dict:
    proc = subprocess.run(
        [*CLI, "lint", "--format", "json", *args, "."], cwd=root, capture_output=True, text=True
    )
    assert proc.returncode == 2, proc.stderr  # the broken file is an error
    return json.loads(proc.stdout)


def key(doc: dict) -> tuple:
    return (
        sorted((f["path"], f["line"], f["rule"], f["message"]) for f in doc["findings"]),
        sorted((e["path"], e["message"]) for e in doc["errors"]),
    )


def test_parallel_scan_matches_serial(big_tree, tmp_path):
    serial = lint(big_tree, "--no-cache", "--jobs", "1")
    parallel = lint(big_tree, "--no-cache", "--jobs", "2")
    assert key(parallel) == key(serial)
    rules = {f["rule"] for f in serial["findings"]}
    assert rules == {"IC001", "IC003"}
    assert serial["summary"]["files_checked"] == engine_mod.PARALLEL_MIN_FILES + 51
    # only the files a rule needs were parsed, in both modes
    assert parallel["summary"]["files_parsed"] == serial["summary"]["files_parsed"] < 20


def test_parallel_scan_cache_round_trip(big_tree, tmp_path):
    cache = str(tmp_path / "cache")
    cold = lint(big_tree, "--jobs", "2", "--cache-dir", cache)
    warm = lint(big_tree, "--jobs", "2", "--cache-dir", cache)
    serial_warm = lint(big_tree, "--jobs", "1", "--cache-dir", cache)
    assert key(cold) == key(warm) == key(serial_warm)
    assert cold["summary"]["files_parsed"] > 0
    assert warm["summary"]["files_parsed"] <= 1  # only the unparseable file, never cached
