"""`invariant-check lint a.py` reports for a.py exactly what `invariant-check lint .` reports for
it, in any batching (pre-commit passes files in batches), cold or with a shared cache: the
project model is the whole project's, never only the files named on the command line."""

from __future__ import annotations

import json
import random
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from invariant_check.cli import commands as cli_module

TREE = {
    "pyproject.toml": "[tool.invariant-check]\n",
    "proj/__init__.py": "",
    # a correct proposer whose compaction helper lives in another module
    "proj/compaction_utils.py": """
        def compact_shared(model, rows):
            model.compact_topk_indices(rows)
    """,
    "proj/proposer.py": """
        from .compaction_utils import compact_shared

        class Proposer:
            def propose(self, token_indices_to_sample):
                hidden = self.model(**self.inputs)
                self.model.model.set_skip_topk(True)
                compact_shared(self.model.model, token_indices_to_sample)
                hidden = self.model(**self.inputs)
    """,
    # the same with a helper that does not compact: a finding
    "proj/logging_utils.py": """
        def log_rows(model, rows):
            print(model, rows)
    """,
    "proj/bad_proposer.py": """
        from .logging_utils import log_rows

        class BadProposer:
            def propose(self, token_indices_to_sample):
                hidden = self.model(**self.inputs)
                self.model.model.set_skip_topk(True)
                log_rows(self.model.model, token_indices_to_sample)
                hidden = self.model(**self.inputs)
    """,
    # model classes whose bases live elsewhere
    "proj/bases.py": """
        import torch.nn as nn

        class Compacting(nn.Module):
            def compact_topk_indices(self, ids):
                pass

        class Plain(nn.Module):
            pass
    """,
    "proj/models.py": """
        from .bases import Compacting, Plain

        class Good(Compacting):
            def set_skip_topk(self, skip):
                self.skip = skip

        class Bad(Plain):
            def set_skip_topk(self, skip):
                self.skip = skip
    """,
    # hooks ordered by a base class's propose()
    "proj/spec_base.py": """
        class SpecBase:
            def on_prefill_end(self, n): ...

            def on_decode_begin(self, n): ...

            def propose(self, n):
                self.run_model(n)
                self.on_prefill_end(n)
                self.on_decode_begin(n)
                for _ in range(self.steps):
                    self.run_model(n)
    """,
    "proj/spec.py": """
        from .spec_base import SpecBase

        class Spec(SpecBase):
            def on_prefill_end(self, n):
                self.model.model.compact_topk_indices(self.rows[:n])

            def on_decode_begin(self, n):
                self.model.model.set_skip_topk(True)
    """,
    # a validation through a helper of another module
    "proj/checks.py": """
        def require_supported(md):
            if not isinstance(md, (FlashAttentionMetadata,)):
                raise ValueError("unsupported")
    """,
    "proj/drafter.py": """
        from .checks import require_supported

        def build(groups):
            for g in groups:
                attn_metadata = g.build()
            require_supported(attn_metadata)
    """,
}
EXPECTED = {("proj/bad_proposer.py", "IC002"), ("proj/models.py", "IC003"), ("proj/drafter.py", "IC001")}


@pytest.fixture
def tree(tmp_path):
    for name, code in TREE.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(code).lstrip("\n"))
    return tmp_path


def lint(tree: Path, *args: str) -> list[tuple]:
    """The real command line, in this process (a subprocess per batch would take minutes)."""
    import os

    runner = CliRunner()
    old = os.getcwd()
    os.chdir(tree)
    try:
        result = runner.invoke(cli_module.main, ["lint", "--format", "json", "--jobs", "1", *args])
    finally:
        os.chdir(old)
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    return sorted((f["path"], f["line"], f["column"], f["rule"], f["message"]) for f in doc["findings"])


def per_file(findings: list[tuple], files: list[str]) -> list[tuple]:
    return [f for f in findings if f[0] in files]


@pytest.mark.parametrize("cache", ["--no-cache", "cached"])
def test_every_batching_reports_what_the_whole_tree_reports(tree, cache):
    args = [cache] if cache == "--no-cache" else []
    whole = lint(tree, *args, ".")
    assert {(f[0], f[3]) for f in whole} == EXPECTED
    files = sorted(n for n in TREE if n.endswith(".py"))
    rng = random.Random(7)
    for _ in range(4):
        order = files[:]
        rng.shuffle(order)
        cut = sorted(rng.sample(range(1, len(order)), 3))
        batches = [order[i:j] for i, j in zip([0, *cut], [*cut, len(order)])]
        for batch in batches:
            assert lint(tree, *args, *batch) == per_file(whole, batch), batch
    for name in files:
        assert lint(tree, *args, name) == per_file(whole, [name]), name


def test_a_helper_edited_elsewhere_invalidates_the_cached_answer(tree):
    # proposer.py is clean because compaction_utils.py compacts; when that file changes, a
    # warm cache must not serve the old answer for proposer.py
    assert per_file(lint(tree, "proj/proposer.py"), ["proj/proposer.py"]) == []
    helper = tree / "proj/compaction_utils.py"
    helper.write_text("def compact_shared(model, rows):\n    print(model, rows)\n")
    found = lint(tree, "proj/proposer.py")
    assert [(f[0], f[3]) for f in found] == [("proj/proposer.py", "IC002")]
    helper.write_text("def compact_shared(model, rows):\n    model.compact_topk_indices(rows)\n")
    assert lint(tree, "proj/proposer.py") == []


def test_a_module_added_later_is_found(tree):
    # drafter.py imports a helper module that does not exist yet: its check is no validation;
    # once the module exists, the cached answer must be revisited
    (tree / "proj/drafter.py").write_text(
        "from .later import require\n\ndef build(groups):\n    for g in groups:\n"
        "        attn_metadata = g.build()\n    require(attn_metadata)\n"
    )
    assert lint(tree, "proj/drafter.py") == []
    (tree / "proj/later.py").write_text(
        "def require(md):\n    assert isinstance(md, FlashAttentionMetadata)\n"
    )
    assert [(f[0], f[3]) for f in lint(tree, "proj/drafter.py")] == [("proj/drafter.py", "IC001")]


def test_a_caller_added_or_fixed_elsewhere_changes_the_cached_answer(tree):
    # IC004 follows a helper's advance into its callers, found by a project-wide search for
    # the helper's name. The cache answers that search from what it knows of unchanged
    # files; a caller added, fixed or deleted later must still change the answer.
    (tree / "proj/steps.py").write_text("def advance(md):\n    md.seq_lens += 1\n")
    good = (
        "from .steps import advance\n\n\ndef draft(common_attn_metadata, n):\n    for _ in range(n):\n"
        "        advance(common_attn_metadata)\n        common_attn_metadata.max_seq_len += 1\n"
    )
    (tree / "proj/good_drafter.py").write_text(good)
    assert per_file(lint(tree, "."), ["proj/steps.py"]) == []  # the whole tree fills the cache
    bad = tree / "proj/bad_drafter.py"
    bad.write_text(good.replace("def draft(", "def draft_again(").replace("        common_attn_metadata.max_seq_len += 1\n", ""))
    found = lint(tree, "proj/steps.py")
    assert [(f[0], f[3]) for f in found] == [("proj/steps.py", "IC004")]
    assert "`draft_again` at proj/bad_drafter.py:6" in found[0][4]
    assert lint(tree, "proj/steps.py", "--no-cache") == found
    bad.write_text(good.replace("def draft(", "def draft_again("))
    assert lint(tree, "proj/steps.py") == []
    bad.write_text(good.replace("def draft(", "def draft_again(").replace("        common_attn_metadata.max_seq_len += 1\n", ""))
    assert lint(tree, "proj/steps.py") == found
    bad.unlink()
    assert lint(tree, "proj/steps.py") == []
