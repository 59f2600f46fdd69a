"""Triton kernel (interpreted on CPU) against the torch reference and an out-of-place oracle."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # the runtime extras; a lint-only install skips this module

from compaction_cases import expected_after, make_buffer, random_row_ids, two_per_request

from invariant_check.compaction import compact_rows_

pytestmark = pytest.mark.usefixtures("interp")


def _check_both_backends(bufs, row_ids, **launch_kw):
    """Run triton on one copy and torch on another; both must equal the oracle."""
    expected = [expected_after(b, row_ids) for b in bufs]
    by_torch = [b.clone() for b in bufs]
    compact_rows_(by_torch, row_ids, backend="torch")
    if launch_kw:
        from invariant_check.compaction import api

        kernel = api._kernel_module()
        kernel.launch(bufs, row_ids, **launch_kw)
    else:
        compact_rows_(bufs, row_ids, backend="triton")
    for got, ref, exp in zip(bufs, by_torch, expected):
        assert torch.equal(ref, exp)
        assert torch.equal(got, exp)


@pytest.mark.parametrize("rid_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("width", [7, 100, 2000])
def test_two_tokens_per_request(width, rid_dtype):
    n = 40
    buf = make_buffer(2 * n + 3, width)
    _check_both_backends([buf], two_per_request(n, rid_dtype))


def test_one_token_per_request_is_identity():
    buf = make_buffer(50, 100)
    before = buf.clone()
    compact_rows_(buf, torch.arange(50, dtype=torch.int32), backend="triton")
    assert torch.equal(buf, before)


def test_mixed_lengths():
    # Requests with 1, 3, 2, 4, 1 tokens: last-token rows 0, 3, 5, 9, 10.
    buf = make_buffer(12, 100, torch.int64)
    _check_both_backends([buf], torch.tensor([0, 3, 5, 9, 10]))


def test_n_zero_changes_nothing():
    buf = make_buffer(8, 100)
    before = buf.clone()
    compact_rows_(buf, torch.empty(0, dtype=torch.int64), backend="triton")
    assert torch.equal(buf, before)


def test_n_one_from_the_last_row():
    buf = make_buffer(9, 100)
    _check_both_backends([buf], torch.tensor([8], dtype=torch.int32))


def test_row_id_equal_to_last_row_among_many():
    rows = 30
    buf = make_buffer(rows, 7)
    _check_both_backends([buf], torch.tensor([2, 4, 4, 29, 29, 29]))


def test_n_larger_than_one_default_chunk():
    from invariant_check.compaction import api

    chunk = api._kernel_module().DEFAULT_CHUNK
    n = chunk + chunk // 2 + 3
    buf = make_buffer(2 * n + 1, 100)
    _check_both_backends([buf], two_per_request(n))


@pytest.mark.parametrize("seed", range(3))
def test_many_chunks_and_bands_with_random_ids(seed):
    # Small tiles make every band walk many chunks, and sources cross chunk edges.
    rows, n = 90, 70
    bufs = [make_buffer(rows, 37, torch.int32, seed), make_buffer(rows, 5, torch.int64, seed + 10)]
    _check_both_backends(bufs, random_row_ids(n, rows, seed), block_w=8, chunk=4)


def test_four_buffers_different_widths_and_dtypes():
    n = 33
    rows = 2 * n + 1
    bufs = [
        make_buffer(rows, 7, torch.int32, 1),
        make_buffer(rows, 100, torch.int64, 2),
        make_buffer(rows + 5, 2000, torch.int32, 3),
        make_buffer(rows, 64, torch.int64, 4),
    ]
    _check_both_backends(bufs, two_per_request(n, torch.int32))


def test_more_buffers_than_one_launch_holds():
    from invariant_check.compaction import api

    count = api._kernel_module().MAX_BUFFERS_PER_LAUNCH + 2
    bufs = [make_buffer(11, 3 + k, torch.int32, k) for k in range(count)]
    _check_both_backends(bufs, torch.tensor([1, 3, 5, 7, 9]))


def test_same_buffer_passed_twice_is_compacted_once():
    buf = make_buffer(20, 100)
    row_ids = two_per_request(8)
    expected = expected_after(buf, row_ids)
    twice = expected_after(expected, row_ids)
    assert not torch.equal(expected, twice)  # a second gather would be visible
    compact_rows_([buf, buf], row_ids, backend="triton")
    assert torch.equal(buf, expected)


def test_row_views_with_padding_stride():
    # Rows are contiguous but padded (stride 128 > width 100): only the view moves.
    base = make_buffer(20, 128)
    view = base[:, :100]
    pad_before = base[:, 100:].clone()
    row_ids = two_per_request(9)
    expected = expected_after(view, row_ids)
    compact_rows_(view, row_ids, backend="triton")
    assert torch.equal(view, expected)
    assert torch.equal(base[:, 100:], pad_before)


def test_non_contiguous_row_ids():
    buf = make_buffer(40, 100)
    row_ids = two_per_request(20)[::2]  # stride 2: 1, 5, 9, ...
    _check_both_backends([buf], row_ids)
