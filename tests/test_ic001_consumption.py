"""IC001's consumption query across shapes the rule page does not show: where the other
entries of a one-entry check go, and which single-entry proofs hold across modules.

Each case runs through the real engine (`run_example`), with and without the prefilter."""

from __future__ import annotations

import pytest

from invariant_check.api.registry import all_rules
from invariant_check.testing import run_example
from invariant_check.api.types import Invalid, Valid

RULE = all_rules()["IC001"]

PROPOSER = """
from .base import Base

class Proposer(Base):
    def propose(self, common_attn_metadata):
        per_layer_attn_metadata = {}
        for attn_group in self.draft_attn_groups:
            attn_metadata = attn_group.build(common_attn_metadata)
            for layer_name in attn_group.layer_names:
                per_layer_attn_metadata[layer_name] = attn_metadata
        assert isinstance(attn_metadata, FlashAttentionMetadata)
        return self.model(attn_metadata=per_layer_attn_metadata)
"""
GUARDED_BASE = """
class Base:
    def initialize_attn_backend(self, attn_groups):
        if len(attn_groups) != 1:
            raise NotImplementedError("one draft attention group")
        self.draft_attn_groups = list(attn_groups)
"""

CASES = [
    # -- single-entry proofs through `self` attributes, across modules ----------------------
    pytest.param(Valid(PROPOSER, files={"base.py": GUARDED_BASE}), id="guard-in-base-module"),
    pytest.param(
        Valid(PROPOSER, files={"base.py": """
class Base:
    draft_attn_groups = []

    def initialize_attn_backend(self, attn_groups):
        self.draft_attn_groups = list(attn_groups)
        if len(self.draft_attn_groups) > 1:
            raise NotImplementedError("one draft attention group")
"""}),
        id="guard-after-the-write-on-the-attribute",
    ),
    pytest.param(
        Invalid(PROPOSER, line=10, files={"base.py": GUARDED_BASE, "multi.py": """
from .example import Proposer

class MultiGroupProposer(Proposer):
    def initialize_attn_backend(self, attn_groups):
        self.draft_attn_groups = attn_groups
"""}),
        id="unguarded-write-in-a-subclass-module",
    ),
    pytest.param(
        Invalid(PROPOSER, line=10, files={"base.py": GUARDED_BASE, "runner.py": """
def load_drafter(drafter, groups):
    drafter.draft_attn_groups = groups
"""}),
        id="write-through-another-object",
    ),
    pytest.param(
        Invalid(PROPOSER, line=10, files={"base.py": """
class Base:
    def initialize_attn_backend(self, attn_groups):
        self.draft_attn_groups = []
"""}),
        id="no-write-proves-one-group",
    ),
    pytest.param(
        Invalid(PROPOSER, line=10, files={"base.py": """
from somewhere_else import UnknownBase

class Base(UnknownBase):
    def initialize_attn_backend(self, attn_groups):
        if len(attn_groups) != 1:
            raise NotImplementedError("one draft attention group")
        self.draft_attn_groups = list(attn_groups)
"""}),
        id="a-base-that-cannot-be-read",
    ),
    # -- full checks after the one-entry check --------------------------------------------
    pytest.param(
        Valid("""
from .checks import check_all

def propose(self, per_layer_attn_metadata):
    first = next(iter(per_layer_attn_metadata.values()))
    assert isinstance(first, FlashAttentionMetadata)
    check_all(per_layer_attn_metadata)
    return self.model(attn_metadata=per_layer_attn_metadata)
""", files={"checks.py": """
def check_all(metadata):
    for name, md in metadata.items():
        if not isinstance(md, (FlashAttentionMetadata, TreeAttentionMetadata)):
            raise ValueError(f"{name}: unsupported {type(md)}")
"""}),
        id="helper-in-another-module-checks-every-entry",
    ),
    pytest.param(
        Invalid("""
from .checks import check_first

def propose(self, per_layer_attn_metadata):
    first = next(iter(per_layer_attn_metadata.values()))
    assert isinstance(first, FlashAttentionMetadata)
    check_first(per_layer_attn_metadata)
    return self.model(attn_metadata=per_layer_attn_metadata)
""", line=5, files={"checks.py": """
def check_first(metadata):
    assert metadata
"""}),
        id="helper-that-checks-no-entry",
    ),
    pytest.param(
        Valid("""
def propose(self, per_layer_attn_metadata):
    first = next(iter(per_layer_attn_metadata.values()))
    assert isinstance(first, FlashAttentionMetadata)
    assert all(isinstance(md, self.allowed_attn_types) for md in per_layer_attn_metadata.values())
    return self.model(attn_metadata=per_layer_attn_metadata)
"""),
        id="all-after-the-pick",
    ),
    pytest.param(
        Invalid("""
def propose(self, per_layer_attn_metadata, strict):
    first = next(iter(per_layer_attn_metadata.values()))
    assert isinstance(first, FlashAttentionMetadata)
    if strict:
        for md in per_layer_attn_metadata.values():
            assert isinstance(md, self.allowed_attn_types)
    return self.model(attn_metadata=per_layer_attn_metadata)
""", line=3, message_contains="used at line 7"),
        id="full-check-on-one-branch-only",
    ),
    # -- where the other entries go -----------------------------------------------------------
    pytest.param(
        Invalid("""
def propose(self, per_layer_attn_metadata):
    first = next(iter(per_layer_attn_metadata.values()))
    assert isinstance(first, FlashAttentionMetadata)
    layers = per_layer_attn_metadata
    x = first.seq_lens
    return layers
""", line=3, message_contains="used at line 6"),
        id="through-a-local-alias",
    ),
    pytest.param(
        Invalid("""
def propose(self, per_layer_attn_metadata):
    first = next(iter(per_layer_attn_metadata.values()))
    assert isinstance(first, FlashAttentionMetadata)
    self.cached_metadata = per_layer_attn_metadata
    return first.seq_lens
""", line=3),
        id="stored-on-self-after-the-check",
    ),
    pytest.param(
        Invalid("""
def propose(self, per_layer_attn_metadata):
    first = next(iter(per_layer_attn_metadata.values()))
    assert isinstance(first, FlashAttentionMetadata)
    step = lambda: self.model(per_layer_attn_metadata)
    return step
""", line=3),
        id="read-by-a-closure",
    ),
    pytest.param(
        Invalid("""
def propose(self, per_layer_attn_metadata):
    first = next(iter(per_layer_attn_metadata.values()))
    assert isinstance(first, FlashAttentionMetadata)
    return list(per_layer_attn_metadata.values())[-1].seq_lens
""", line=3),
        id="the-other-end-picked-after-a-first-entry-check",
    ),
    pytest.param(
        Valid("""
def propose(self, per_layer_attn_metadata):
    assert isinstance(next(iter(per_layer_attn_metadata.values())), FlashAttentionMetadata)
    if len(per_layer_attn_metadata) > 4 or per_layer_attn_metadata is None:
        return None
    return next(iter(per_layer_attn_metadata.values())).seq_lens
"""),
        id="the-same-entry-picked-again",
    ),
    pytest.param(
        Invalid("""
def propose(self, groups):
    for g in groups:
        attn_metadata = g.build()
        self.register(attn_metadata)
    assert isinstance(attn_metadata, FlashAttentionMetadata)
    return attn_metadata.seq_lens
""", line=5, message_contains="handed on at line 4"),
        id="loop-hands-each-value-to-a-call",
    ),
    pytest.param(
        Valid("""
def propose(self, groups):
    for g in groups:
        attn_metadata = g.build()
    assert isinstance(attn_metadata, FlashAttentionMetadata)
    return self.run(attn_metadata.seq_lens)
"""),
        id="loop-keeps-only-the-last-value",
    ),
    pytest.param(
        Invalid("""
def propose(self, groups):
    for g in groups:
        attn_metadata = g.build()
    assert isinstance(attn_metadata, (FlashAttentionMetadata, TreeAttentionMetadata))
    return isinstance(attn_metadata, TreeAttentionMetadata)
""", line=4),
        id="a-type-test-after-the-check-decides-for-the-others",
    ),
    pytest.param(
        Invalid("""
def propose(self, per_layer_attn_metadata):
    md = next(iter(per_layer_attn_metadata.values()))
    try:
        assert isinstance(md, FlashAttentionMetadata)
    finally:
        self.model(per_layer_attn_metadata)
""", line=4),
        id="used-in-finally",
    ),
    pytest.param(
        Invalid("""
class Proposer:
    def propose(self, n):
        md = next(iter(self.per_layer_attn_metadata.values()))
        if isinstance(md, TreeAttentionMetadata):
            return self._propose_tree(md.tree_attn_bias)
        return self._run_draft_steps(n)

    def _run_draft_steps(self, n):
        for _ in range(n):
            self._step()

    def _step(self):
        return self.model(attn_metadata=self.per_layer_attn_metadata)
""", line=4, message_contains="used at line 6: `self._run_draft_steps(n)`"),
        id="a-method-of-the-same-object-reads-the-attribute",
    ),
    pytest.param(
        Valid("""
class Proposer:
    def propose(self, n):
        md = next(iter(self.per_layer_attn_metadata.values()))
        if isinstance(md, TreeAttentionMetadata):
            return self._propose_tree(md.tree_attn_bias)
        return self._propose_tree(None)

    def _propose_tree(self, bias):
        return self.tree_model(bias)
"""),
        id="methods-called-after-do-not-read-the-attribute",
    ),
]


@pytest.mark.parametrize("example", CASES)
@pytest.mark.parametrize("prefilter", [True, False], ids=["prefilter", "no-prefilter"])
def test_case(example, prefilter, tmp_path):
    findings = run_example(RULE, example, tmp_path, prefilter=prefilter)
    if isinstance(example, Valid):
        assert findings == [], [f.message for f in findings]
        return
    lines = [f.line for f in findings]
    assert example.line in lines, (lines, [f.message for f in findings])
    if example.message_contains:
        f = next(f for f in findings if f.line == example.line)
        assert example.message_contains in f.message, f.message
