"""The prefilter atoms of IC004 (`fields.Moved`) and IC005 (`fields.Passed`) read the source
as text; they must never hide a finding. Spellings that stretch the text scan (line
continuations, comments inside a call, brackets inside a subscript, the operand on the
right, negative amounts) are reported with the prefilter on, and on generated draft steps
the findings with the prefilter equal those with every definition parsed."""

from __future__ import annotations

import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from invariant_check.lint.engine import Engine
from invariant_check.api.registry import all_rules

CODES = ("IC004", "IC005")
METADATA = """
from dataclasses import dataclass


@dataclass
class CommonAttentionMetadata:
    seq_lens: "torch.Tensor"
    max_seq_len: int
    positions: "torch.Tensor | None" = None
    slot_mapping: "torch.Tensor | None" = None
"""
INPUTS = """
def update_eagle_inputs(tokens, input_buffers):
    input_buffers.positions += 1
"""
HEADER = "import torch\nfrom .metadata import CommonAttentionMetadata\nfrom .inputs import update_eagle_inputs\n\n\n"


def lint(files: dict[str, str], *, prefilter: bool) -> list[tuple]:
    rules = [all_rules()[c] for c in CODES]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pkg"
        root.mkdir()
        for name, code in files.items():
            (root / name).write_text(code)
        result = Engine(rules, {r.CODE: r.default_options() for r in rules}, prefilter=prefilter, jobs=1, root=root, cwd=root).lint(
            sorted(root.rglob("*.py"))
        )
        assert not result.errors, result.errors
        return sorted((f.path, f.line, f.rule) for f in result.findings)


def project(main: str) -> dict[str, str]:
    return {"metadata.py": METADATA, "inputs.py": INPUTS, "main.py": HEADER + textwrap.dedent(main).lstrip("\n")}


ADVANCES = [
    "md.seq_lens += 1",
    "md.\\\n        seq_lens += 1",
    "md.seq_lens[idx[0]:idx[1]] += 1",
    "md.seq_lens[\n        : n\n    ] += 1",
    "md.seq_lens -= -1",
    "md.seq_lens = 1 + md.seq_lens",
    "md.seq_lens = (md.seq_lens\n        # one more\n        ) + 1",
    "md.seq_lens = torch.minimum(md.seq_lens + 1, cap)",
    "md.seq_lens.add_(1)",
    "md.seq_lens .sub_( -1)",
    "md.seq_lens.copy_(md.seq_lens + 1)",
    "torch.add(md.seq_lens, 1, out=md.seq_lens)",
    "torch.clamp(md.seq_lens[:n] + 1, max=cap, out=md.seq_lens[:n])",
    "new = md.seq_lens + 1\n    md.seq_lens = new",
]


@pytest.mark.parametrize("advance", ADVANCES)
def test_every_advance_spelling_is_reported_with_the_prefilter(advance):
    files = project(f"""
def step(md: CommonAttentionMetadata, idx, n, cap):
    {advance}
""")
    found = lint(files, prefilter=True)
    assert [(p, rule) for p, _, rule in found] == [("main.py", "IC004")], found
    assert found == lint(files, prefilter=False)


FORWARDS = [
    "self.run_model(n, md)",
    "self.run_model(\n            n,\n            # the step's metadata\n            md,\n        )",
    "self.run_model(n, attn_metadata=self.\\\n            attn_md)",
    "self._run_model(n, *[attn_metadata])",
    "self.run_model(n, **{'attn_metadata': attn_metadata})",
]


@pytest.mark.parametrize("forward", FORWARDS)
def test_every_way_of_passing_the_metadata_is_seen_with_the_prefilter(forward):
    files = project(f"""
class Drafter:
    def draft(self, n, md, attn_metadata):
        self.attn_md = md
        for step in range(3):
            hidden = {forward}
            update_eagle_inputs(hidden, self.input_buffers)
""")
    found = lint(files, prefilter=True)
    assert found == lint(files, prefilter=False)
    if "**" not in forward and "*[" not in forward:
        assert [(p, rule) for p, _, rule in found] == [("main.py", "IC005")], found


# -- generated draft steps ---------------------------------------------------------------------------

NAMES = st.sampled_from(["md", "cad", "common_attn_metadata", "self.md"])
FIXES = st.sampled_from([
    "", "{x}.max_seq_len += 1", "{x}.max_seq_len = min({x}.max_seq_len + 1, cap)",
    "if flag:\n            {x}.max_seq_len += 1", "if {x}.max_seq_len is not None:\n            {x}.max_seq_len += 1",
])
REBUILDS = st.sampled_from(["", "attn_metadata = self.build(n)", "if step == 1:\n            attn_metadata = self.build(n)",
                            "if self.flag:\n            attn_metadata = self.build(n)", "self.refresh(attn_metadata)"])


@st.composite
def draft_step(draw) -> str:
    x = draw(NAMES)
    adv = draw(st.sampled_from(ADVANCES)).replace("md.", f"{x}.").replace("(md", f"({x}")
    fix = draw(FIXES).format(x=x)
    rebuild = draw(REBUILDS)
    loop = draw(st.sampled_from(["for step in range(k):", "while step < k:"]))
    forward = draw(st.sampled_from(FORWARDS + ["self.model(ids)"])).replace("md", "attn_metadata")
    body = [adv, fix, rebuild, f"hidden = {forward}", draw(st.sampled_from(["", "update_eagle_inputs(hidden, self.input_buffers)"]))]
    if draw(st.booleans()):
        body.reverse()
    lines = "\n        ".join(b.replace("\n    ", "\n        ") for b in body if b)
    ann = "" if x == "self.md" else f"{x}: CommonAttentionMetadata, "
    head = f"def d{draw(st.integers(0, 99))}(self, {ann}attn_metadata, idx, n, k, cap, flag, ids, step=0):\n"
    if x == "self.md":
        head += "    self.md = CommonAttentionMetadata(seq_lens=None, max_seq_len=0)\n"
    return head + f"    {loop}\n        {lines}\n        pass\n"


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(draft_step(), min_size=1, max_size=3))
def test_generated_draft_steps_same_findings_with_and_without_prefilter(steps):
    files = project("\n\n".join(steps))
    assert lint(files, prefilter=True) == lint(files, prefilter=False)
