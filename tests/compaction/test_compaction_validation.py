"""Bad arguments give a one-line ValueError naming the argument; value checks never sync unless asked."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # the runtime extras; a lint-only install skips this module

from compaction_cases import make_buffer, two_per_request

from invariant_check.compaction import api, compact_rows_
from invariant_check.compaction.validate import DEBUG_ENV


def _raises(argument: str, buffers, row_ids, **kw):
    with pytest.raises(ValueError) as info:
        compact_rows_(buffers, row_ids, backend=kw.pop("backend", "torch"), **kw)
    message = str(info.value)
    assert message.startswith(argument + ":"), message
    assert "\n" not in message
    return message


def test_row_ids_must_be_1d():
    _raises("row_ids", make_buffer(8, 4), torch.zeros(2, 2, dtype=torch.int64))


def test_row_ids_must_be_integer():
    _raises("row_ids", make_buffer(8, 4), torch.tensor([1.0, 3.0]))


def test_row_ids_must_be_a_tensor():
    _raises("row_ids", make_buffer(8, 4), [1, 3])


def test_row_id_below_its_position():
    buf = make_buffer(8, 4)
    before = buf.clone()
    message = _raises("row_ids", buf, torch.tensor([0, 3, 1]))
    assert "row_ids[2] = 1" in message
    assert torch.equal(buf, before)  # rejected before anything moved


def test_row_id_out_of_range():
    message = _raises("row_ids", make_buffer(8, 4), torch.tensor([1, 8], dtype=torch.int32))
    assert "8" in message


def test_row_id_out_of_range_for_the_shortest_buffer():
    _raises("row_ids", [make_buffer(8, 4), make_buffer(6, 4)], torch.tensor([1, 7]))


def test_more_rows_requested_than_buffer_has():
    _raises("row_ids", make_buffer(3, 4), torch.arange(4))


def test_buffers_on_different_devices():
    meta = torch.empty(8, 4, dtype=torch.int32, device="meta")
    _raises("buffers[1]", [make_buffer(8, 4), meta], torch.tensor([1]))


def test_row_ids_on_another_device():
    _raises("row_ids", make_buffer(8, 4), torch.tensor([1], device="meta"))


def test_non_contiguous_rows():
    buf = make_buffer(8, 8)
    _raises("buffers[0]", buf[:, ::2], torch.tensor([1]))
    _raises("buffers[0]", buf.t(), torch.tensor([1]))


def test_buffer_must_be_2d_integer_tensor():
    _raises("buffers[0]", make_buffer(8, 1)[:, 0], torch.tensor([1]))
    _raises("buffers[1]", [make_buffer(8, 4), make_buffer(8, 4).float()], torch.tensor([1]))
    _raises("buffers[0]", [None], torch.tensor([1]))
    _raises("buffers", 3, torch.tensor([1]))


def test_overlapping_views_are_rejected():
    buf = make_buffer(8, 16)
    _raises("buffers[1]", [buf[:, :10], buf[:, 5:15]], torch.tensor([1]))


def test_disjoint_views_of_one_storage_are_both_compacted():
    buf = make_buffer(8, 16)
    left, right = buf[:, :8], buf[:, 8:]
    expected = buf.clone()
    expected[:2] = buf.clone()[[1, 5]]
    compact_rows_([left, right], torch.tensor([1, 5]))
    assert torch.equal(buf, expected)


def test_row_ids_sharing_memory_with_a_buffer():
    buf = make_buffer(8, 4, torch.int64)
    buf[0, :2] = torch.tensor([1, 3])
    _raises("row_ids", buf, buf[0, :2])


def test_unknown_backend():
    _raises("backend", make_buffer(8, 4), torch.tensor([1]), backend="cuda")


def test_triton_backend_on_cpu_needs_the_interpreter(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    # A compiled-mode kernel module, loaded the ordinary way.
    monkeypatch.setattr(api, "_kernel", None)
    if api._kernel_module().is_interpreted():
        pytest.skip("kernel module was imported under TRITON_INTERPRET by the environment")
    _raises("backend", make_buffer(8, 4), torch.tensor([1]), backend="triton")


@pytest.fixture
def value_check_calls(monkeypatch):
    calls = []
    real = api.check_row_values

    def spy(row_ids, buffers):
        calls.append(row_ids.device.type)
        return real(row_ids, buffers)

    monkeypatch.setattr(api, "check_row_values", spy)
    return calls


def test_value_checks_skip_non_cpu_devices_by_default(value_check_calls, monkeypatch):
    # "meta" stands in for an accelerator: its data cannot be read at all, so
    # any value check (a device sync on CUDA) would raise here.
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    buf = torch.empty(16, 4, dtype=torch.int32, device="meta")
    compact_rows_(buf, torch.empty(5, dtype=torch.int64, device="meta"))
    assert value_check_calls == []


def test_debug_env_turns_value_checks_on(value_check_calls, monkeypatch):
    monkeypatch.setenv(DEBUG_ENV, "1")
    buf = torch.empty(16, 4, dtype=torch.int32, device="meta")
    with pytest.raises(RuntimeError, match="meta"):  # it tried to read the ids
        compact_rows_(buf, torch.empty(5, dtype=torch.int64, device="meta"))
    assert value_check_calls == ["meta"]


def test_check_argument_overrides(value_check_calls, monkeypatch):
    monkeypatch.setenv(DEBUG_ENV, "1")
    buf = torch.empty(16, 4, dtype=torch.int32, device="meta")
    compact_rows_(buf, torch.empty(5, dtype=torch.int64, device="meta"), check=False)
    assert value_check_calls == []
    compact_rows_(make_buffer(16, 4), two_per_request(5), check=True)
    assert value_check_calls == ["cpu"]


def test_cpu_value_checks_always_run(value_check_calls, monkeypatch):
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    compact_rows_(make_buffer(16, 4), two_per_request(5))
    assert value_check_calls == ["cpu"]
