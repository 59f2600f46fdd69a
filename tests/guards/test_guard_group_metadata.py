"""Guard `group-metadata` on vLLM's own `SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata`
and real `AttentionGroup`s.

The metadata builders are stand-ins: the real ones need a GPU attention backend. They return
instances of vLLM's real metadata classes, which is all the invariant is about.
"""

from __future__ import annotations

import types

import pytest
from guards_helpers import requires_vllm

pytestmark = [requires_vllm, pytest.mark.vllm]


class _Builder:
    def __init__(self, md_type):
        self.md_type = md_type

    def build_for_drafting(self, common_attn_metadata, draft_index):
        return object.__new__(self.md_type)


@pytest.fixture(scope="module")
def md_types():
    from vllm.model_executor.layers.attention.mla_attention import MLACommonMetadata
    from vllm.v1.attention.backends.triton_attn import TritonAttentionMetadata

    return TritonAttentionMetadata, MLACommonMetadata


def make_proposer(group_types, allowed, num_spec=3):
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.worker.utils import AttentionGroup

    p = SpecDecodeBaseProposer.__new__(SpecDecodeBaseProposer)
    p.draft_attn_groups = [
        AttentionGroup(backend=None, layer_names=[f"model.layers.{gi}.attn.{k}" for k in range(2)],
                       kv_cache_spec=None, kv_cache_group_id=gi, metadata_builders=[_Builder(t)])
        for gi, t in enumerate(group_types)
    ]
    p.allowed_attn_types = allowed
    p.num_speculative_tokens = num_spec
    return p


def test_all_groups_allowed_passes(guards, md_types):
    triton, _ = md_types
    rep = guards(mode="raise")
    p = make_proposer([triton, triton], (triton,))
    per_group, per_layer = p.build_per_group_and_layer_attn_metadata(None, draft_index=0)
    assert len(per_group) == 2 and len(per_layer) == 4
    assert rep.violations == 0


@pytest.mark.parametrize("draft_index", [0, 1, 2])
def test_disallowed_type_in_a_non_last_group_is_reported_at_every_step(guards, md_types, draft_index):
    from invariant_check.runtime_guards.errors import InvariantViolation

    triton, mla = md_types
    guards(mode="raise")
    p = make_proposer([mla, triton], (triton,))  # the last group is fine: the 0.17-0.19 check passed
    with pytest.raises(InvariantViolation) as info:
        p.build_per_group_and_layer_attn_metadata(None, draft_index=draft_index)
    v = info.value.values
    assert info.value.invariant == "disallowed-type"
    assert v["group"] == 0 and v["draft_step"] == draft_index
    assert v["type_found"].endswith("MLACommonMetadata")
    assert v["allowed_types"] == [f"{triton.__module__}.{triton.__qualname__}"]
    assert "model.layers.0.attn.0" in v["layers"]


def test_no_type_check_for_one_speculative_token_or_without_allow_list(guards, md_types):
    triton, mla = md_types
    rep = guards(mode="raise")
    make_proposer([mla, triton], (triton,), num_spec=1).build_per_group_and_layer_attn_metadata(None, 1)
    make_proposer([mla, triton], None).build_per_group_and_layer_attn_metadata(None, 1)
    assert rep.violations == 0


def test_layer_entries_must_be_present_and_belong_to_their_group(guards, md_types):
    from invariant_check.runtime_guards import group_metadata
    from invariant_check.runtime_guards.errors import InvariantViolation

    triton, _ = md_types
    guards(mode="raise")

    # The pre-0.20 shape of the bug: per-layer entries filled from a variable left over by the loop.
    def buggy_build(self, cad, draft_index=0):
        per_group, per_layer = [], {}
        for g in self.draft_attn_groups:
            md = g.build_metadata_for_drafting(cad, draft_index)
            per_group.append(md)
        for g in self.draft_attn_groups:
            for name in g.layer_names[:1]:
                per_layer[name] = md
        return per_group, per_layer

    p = make_proposer([triton, triton], (triton,))
    wrapped = group_metadata.wrap_build(buggy_build, type(p))
    with pytest.raises(InvariantViolation) as info:
        wrapped(p, None, 1)
    assert info.value.invariant == "entry-not-own-group"
    assert info.value.values["group"] == 0 and info.value.values["layer"] == "model.layers.0.attn.0"

    def missing_build(self, cad, draft_index=0):
        per_group, per_layer = buggy_build(self, cad, draft_index)
        return per_group, {k: v for k, v in per_layer.items() if "layers.0" not in k}

    with pytest.raises(InvariantViolation) as info:
        group_metadata.wrap_build(missing_build, type(p))(p, None, 1)
    assert info.value.invariant == "missing-layer-entry"


def test_bad_group_metadata_fault_only_from_step_one(guards, md_types):
    from invariant_check.runtime_guards.errors import InvariantViolation

    triton, _ = md_types
    guards(mode="raise", faults=("bad-group-metadata",))
    p = make_proposer([triton], None)  # CPU/CUDA: vLLM has no allow-list
    per_group, _ = p.build_per_group_and_layer_attn_metadata(None, draft_index=0)
    assert len(per_group) == 1
    with pytest.raises(InvariantViolation) as info:
        p.build_per_group_and_layer_attn_metadata(None, draft_index=1)
    assert info.value.values["group"] == 0 and info.value.values["num_groups"] == 2
    assert info.value.values["type_found"].endswith("FaultInjectedMetadata")


def test_legacy_propose_path_checks_what_reaches_set_forward_context(guards, md_types):
    """vLLM 0.17-0.19 built the metadata inside propose(); emulated here by a small proposer with
    the same loop shape (that vLLM is not installed), patched through the real patcher."""
    from invariant_check.runtime_guards import patcher
    from invariant_check.runtime_guards.errors import InvariantViolation

    triton, mla = md_types
    guards(mode="raise")
    legacy = types.ModuleType(patcher.LEGACY_EAGLE_MODULE)
    calls = []

    def set_forward_context(attn_metadata, *args, **kwargs):
        calls.append(dict(attn_metadata))

    class SpecDecodeBaseProposer:
        def propose(self, steps=2):
            per_layer = {}
            for step in range(steps):
                for g in self.draft_attn_groups:
                    md = g.get_metadata_builder().build_for_drafting(None, step)
                    for name in g.layer_names:
                        per_layer[name] = md
                # 0.19 checked only `md`, the last group's metadata, here.
                if self.allowed_attn_types is not None and not isinstance(md, self.allowed_attn_types):
                    raise ValueError("unsupported")
                legacy.set_forward_context(per_layer, None)

    SpecDecodeBaseProposer.__module__ = legacy.__name__
    legacy.SpecDecodeBaseProposer = SpecDecodeBaseProposer
    legacy.set_forward_context = set_forward_context
    patcher.on_module_loaded(legacy)
    assert getattr(SpecDecodeBaseProposer.__dict__["propose"], "__invariant_check_wrapped__", False)

    good = make_proposer([triton, triton], (triton,))
    p = SpecDecodeBaseProposer()
    p.draft_attn_groups, p.allowed_attn_types, p.num_speculative_tokens = good.draft_attn_groups, (triton,), 3
    p.propose()
    assert len(calls) == 2

    bad = make_proposer([mla, triton], (triton,))
    p.draft_attn_groups = bad.draft_attn_groups
    with pytest.raises(InvariantViolation) as info:
        p.propose()
    assert info.value.values["group"] == 0
