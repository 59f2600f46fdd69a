"""Spellings of the draft-step bugs that no rule example holds, linted with the real CLI, each
file alone and in its folder (the answers must agree)."""

from __future__ import annotations

import json
import textwrap

from ic_support import assert_no_traceback, run_cli

META = """
from dataclasses import dataclass
import torch


@dataclass
class CommonAttentionMetadata:
    seq_lens: torch.Tensor
    max_seq_len: int
    seq_lens_cpu_upper_bound: torch.Tensor | None = None
"""

# `torch.add(..., out=...)` advances in place: IC004's hint must name the amount (1), not the
# tensor the sum is written to.
OUT_ADD = """
import torch
from .meta import CommonAttentionMetadata


class Proposer:
    def run(self, batch_md: CommonAttentionMetadata):
        for _ in range(self.k):
            torch.add(batch_md.seq_lens, 1, out=batch_md.seq_lens)
            batch_md.seq_lens_cpu_upper_bound = None
            self.forward(batch_md)
"""

# The metadata passed to the model is itself advanced in place, derived fields included:
# nothing is left stale, neither for IC004 nor for IC005.
IN_PLACE = """
from .meta import CommonAttentionMetadata


def _sync_max(md: CommonAttentionMetadata, cap: int) -> None:
    md.max_seq_len = min(md.max_seq_len + 1, cap)


def step(md: CommonAttentionMetadata, cap: int, model):
    for _ in range(3):
        md.seq_lens += 1
        md.seq_lens_cpu_upper_bound = None
        _sync_max(md, cap)
        model(md)
"""

# The same loop with a separately built metadata object that is not rebuilt: IC005.
BUILT_ONCE = """
from .meta import CommonAttentionMetadata


def step(common: CommonAttentionMetadata, builder, cap: int, model):
    attn_metadata = builder.build(common)
    for _ in range(3):
        common.seq_lens += 1
        common.seq_lens_cpu_upper_bound = None
        common.max_seq_len = min(common.max_seq_len + 1, cap)
        model(attn_metadata)
"""


def _tree(tmp_path):
    pkg = tmp_path / "drafts"
    pkg.mkdir()
    (tmp_path / "pyproject.toml").write_text("[tool.invariant-check]\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "meta.py").write_text(textwrap.dedent(META))
    for name, code in (("out_add.py", OUT_ADD), ("in_place.py", IN_PLACE), ("built_once.py", BUILT_ONCE)):
        (pkg / name).write_text(textwrap.dedent(code))
    return tmp_path


def _findings(tmp_path, *paths):
    run = run_cli("lint", "--no-cache", "--format", "json", *paths, cwd=tmp_path)
    assert_no_traceback(run)
    return sorted(
        (f["path"].rsplit("/", 1)[-1], f["line"], f["rule"], f.get("hint") or "")
        for f in json.loads(run.out)["findings"]
    )


def test_each_file_alone_and_in_its_folder(tmp_path):
    root = _tree(tmp_path)
    whole = _findings(root, "drafts")
    alone = sorted(f for name in ("out_add.py", "in_place.py", "built_once.py") for f in _findings(root, f"drafts/{name}"))
    assert whole == alone
    assert [(name, line, rule) for name, line, rule, _ in whole] == [
        ("built_once.py", 7, "IC005"),
        ("out_add.py", 9, "IC004"),
    ], whole
    hint = next(h for name, _, rule, h in whole if rule == "IC004")
    # the hint is the fix: the loop caps no lengths, so the maximum advances by the amount, 1
    assert "+ batch_md.max_seq_len += 1" in hint, hint
