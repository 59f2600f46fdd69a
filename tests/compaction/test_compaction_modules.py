"""``compact_topk_indices_`` on model trees: a drop-in for vLLM's ``compact_topk_indices``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # the runtime extras; a lint-only install skips this module

from compaction_cases import expected_after, make_buffer, two_per_request
from torch import nn

from invariant_check.compaction import NoTopkBufferError, compact_topk_indices_, find_topk_buffers


class Attn(nn.Module):
    def __init__(self, buffer):
        super().__init__()
        self.topk_indices_buffer = buffer


class Model(nn.Module):
    compact_topk_indices = compact_topk_indices_  # the method replacement the runtime plugin installs

    def __init__(self, *attns):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(a) for a in attns)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_buffer_shared_by_two_modules_is_compacted_once(backend, request):
    if backend == "triton":
        request.getfixturevalue("interp")
    shared = make_buffer(21, 100, torch.int32, 1)
    own = make_buffer(30, 7, torch.int64, 2)
    model = Model(Attn(shared), Attn(shared), Attn(own), Attn(None))
    slot_ids = two_per_request(10, torch.int32)
    want_shared, want_own = expected_after(shared, slot_ids), expected_after(own, slot_ids)
    compact_topk_indices_(model, slot_ids, backend=backend)
    assert torch.equal(shared, want_shared)
    assert torch.equal(own, want_own)


def test_works_bound_as_the_models_method():
    shared = make_buffer(21, 16)
    model = Model(Attn(shared), Attn(shared))
    slot_ids = two_per_request(10)
    want = expected_after(shared, slot_ids)
    assert model.compact_topk_indices(slot_ids) is None
    assert torch.equal(shared, want)


def test_registered_buffers_and_plain_object_holders_are_found():
    class Impl:  # attention backends keep the buffer on a non-Module ``impl``
        def __init__(self, buffer):
            self.topk_indices_buffer = buffer

    registered = make_buffer(9, 4, torch.int32, 3)
    on_impl = make_buffer(9, 5, torch.int32, 4)
    root = nn.Module()
    root.indexer = nn.Module()
    root.indexer.register_buffer("topk_indices_buffer", registered)
    root.attn = nn.Module()
    root.attn.impl = Impl(on_impl)
    root.attn.impls = [Impl(on_impl)]
    found = find_topk_buffers(root, refresh=True)
    assert {b.data_ptr() for b in found} == {registered.data_ptr(), on_impl.data_ptr()}
    slot_ids = torch.tensor([2, 4, 8])
    want = [expected_after(registered, slot_ids), expected_after(on_impl, slot_ids)]
    compact_topk_indices_(root, slot_ids)
    assert torch.equal(registered, want[0]) and torch.equal(on_impl, want[1])


def test_buffers_re_pointed_after_the_first_call_are_followed():
    # vLLM points the draft's modules at the target's buffer after loading.
    first, target = make_buffer(9, 8, torch.int32, 5), make_buffer(9, 8, torch.int32, 6)
    a, b = Attn(first), Attn(first)
    model = Model(a, b)
    slot_ids = torch.tensor([1, 3])
    compact_topk_indices_(model, slot_ids)
    a.topk_indices_buffer = b.topk_indices_buffer = target
    want = expected_after(target, slot_ids)
    compact_topk_indices_(model, slot_ids)
    assert torch.equal(target, want)


def test_model_without_buffers_raises_naming_it_unless_none_is_expected():
    model = Model(Attn(None))
    with pytest.raises(NoTopkBufferError) as info:
        compact_topk_indices_(model, torch.tensor([0]))
    assert f"{__name__}.Model" in str(info.value) and "missing_ok=True" in str(info.value)
    with pytest.raises(LookupError):  # also bound as the model's method
        model.compact_topk_indices(torch.tensor([0]))
    assert compact_topk_indices_(model, torch.tensor([0]), missing_ok=True) is None


def test_buffers_wired_after_a_first_empty_lookup_are_found():
    # vLLM points the draft's attention at its buffer after the model is built: a lookup cached
    # before that must not make the compaction fail (or, worse, skip) later
    attn = Attn(None)
    model = Model(attn)
    compact_topk_indices_(model, torch.tensor([0]), missing_ok=True)  # caches "no holder"
    attn.topk_indices_buffer = buf = make_buffer(8, 4, torch.int32, 9)
    slot_ids = torch.tensor([1, 3])
    want = expected_after(buf, slot_ids)
    compact_topk_indices_(model, slot_ids)
    assert torch.equal(buf, want)


@pytest.mark.vllm
def test_matches_vllm_deepseek_mtp_compact_topk_indices():
    mtp = pytest.importorskip("vllm.model_executor.models.deepseek_mtp")
    vllm_method = mtp.DeepSeekMultiTokenPredictor.compact_topk_indices

    def tree(buffer):
        # The attribute path vLLM's method walks: layers[k].mtp_block.self_attn.mla_attn.
        root = nn.Module()
        layer = nn.Module()
        layer.mtp_block = nn.Module()
        layer.mtp_block.self_attn = nn.Module()
        layer.mtp_block.self_attn.mla_attn = Attn(buffer)
        root.layers = nn.ModuleDict({"61": layer})
        return root

    buf = make_buffer(64, 2048, torch.int32, 7)
    theirs, ours = buf.clone(), buf.clone()
    slot_ids = torch.tensor([1, 4, 5, 9, 20, 63], dtype=torch.int32)
    vllm_method(tree(theirs), slot_ids)
    compact_topk_indices_(tree(ours), slot_ids)
    assert torch.equal(ours, theirs)
    assert torch.equal(ours, expected_after(buf, slot_ids))
    # where vLLM's method finds no buffer it returns having done nothing; ours says so
    empty = tree(None)
    del empty.layers["61"].mtp_block.self_attn.mla_attn.topk_indices_buffer  # non-sparse MLA has none
    assert vllm_method(empty, slot_ids) is None
    with pytest.raises(NoTopkBufferError):
        compact_topk_indices_(empty, slot_ids)


@pytest.mark.vllm
def test_vllm_shared_buffer_property_holders():
    sparse = pytest.importorskip("vllm.model_executor.layers.attention.sparse_mla_attention")

    class Impl(sparse.SharedTopkIndicesBuffer):
        pass

    indexer = Attn(make_buffer(17, 32, torch.int32, 8))
    impl = Impl()
    impl.init_topk_indices_buffer(indexer, None)  # resolves through the indexer on every read
    attn = nn.Module()
    attn.indexer = indexer
    attn.impl = impl
    root = nn.Module()
    root.attn = attn
    slot_ids = two_per_request(8)
    want = expected_after(indexer.topk_indices_buffer, slot_ids)
    compact_topk_indices_(root, slot_ids)
    assert torch.equal(indexer.topk_indices_buffer, want)  # once, though two holders report it
