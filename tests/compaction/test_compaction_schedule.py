"""Programs launched one at a time in reverse (and shuffled) order.

The interpreter normally runs programs 0, 1, 2, ... which happens to be a safe
order for any in-place gather with ``row_ids[i] >= i``. A GPU gives no such
order. Reversing it exposes the row-per-program kernel; the column-band kernel
must not care.
"""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")  # the runtime extras; a lint-only install skips this module

from compaction_cases import expected_after, make_buffer, random_row_ids, two_per_request

pytestmark = pytest.mark.usefixtures("interp")


def test_naive_kernel_is_right_in_launch_order(interp):
    # Same input as the reverse-order test below: only the schedule differs.
    buf = make_buffer(41, 100)
    row_ids = two_per_request(20)
    expected = expected_after(buf, row_ids)
    interp.naive.naive_launch(buf, row_ids)
    assert torch.equal(buf, expected)


def test_naive_kernel_fails_in_reverse_order(interp, reversed_programs):
    """The counter-example: program 1 overwrites row 1 before program 0 reads it."""
    buf = make_buffer(41, 100)
    old = buf.clone()
    row_ids = two_per_request(20)
    expected = expected_after(buf, row_ids)
    interp.naive.naive_launch(buf, row_ids)
    assert reversed_programs["seen"] == list(range(19, -1, -1))
    assert not torch.equal(buf, expected)
    # Program 15 copied old row 31 into row 15; then programs 7, 3, 1 and 0 each
    # read a row that had already been overwritten, so old row 31 travelled
    # down the chain 15 -> 7 -> 3 -> 1 -> 0 instead of old row 1 reaching row 0.
    for row in (15, 7, 3, 1, 0):
        assert torch.equal(buf[row], old[31])
    assert not torch.equal(buf[0], expected[0])


@pytest.mark.parametrize("rid_dtype", [torch.int32, torch.int64])
def test_band_kernel_is_right_in_reverse_order(interp, reversed_programs, rid_dtype):
    n = 20
    bufs = [make_buffer(2 * n + 1, 100, torch.int32, 1), make_buffer(2 * n + 1, 37, torch.int64, 2)]
    row_ids = two_per_request(n, rid_dtype)
    expected = [expected_after(b, row_ids) for b in bufs]
    interp.kernel.launch(bufs, row_ids, block_w=16, chunk=8)
    # 7 + 3 bands, all run, last first.
    assert reversed_programs["seen"] == list(range(9, -1, -1))
    for got, exp in zip(bufs, expected):
        assert torch.equal(got, exp)


@pytest.mark.parametrize("seed", range(4))
def test_band_kernel_is_right_in_shuffled_order(interp, reversed_programs, seed):
    rows, n = 64, 48
    bufs = [make_buffer(rows, 50, torch.int32, seed), make_buffer(rows, 9, torch.int64, seed + 7)]
    row_ids = random_row_ids(n, rows, seed)
    expected = [expected_after(b, row_ids) for b in bufs]
    bands = 50 // 8 + 1 + 9 // 8 + 1
    order = list(range(bands))
    random.Random(seed).shuffle(order)
    reversed_programs["order"] = order
    interp.kernel.launch(bufs, row_ids, block_w=8, chunk=4)
    assert reversed_programs["seen"] == order
    for got, exp in zip(bufs, expected):
        assert torch.equal(got, exp)


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@st.composite
def _cases(draw):
    rows = draw(st.integers(1, 48))
    n = draw(st.integers(0, rows))
    row_ids = [draw(st.integers(i, rows - 1)) for i in range(n)]
    widths = draw(st.lists(st.integers(1, 40), min_size=1, max_size=3))
    block_w = draw(st.sampled_from([4, 8, 16]))
    chunk = draw(st.sampled_from([2, 4, 8]))
    bands = sum(-(-w // block_w) for w in widths)
    order = draw(st.permutations(list(range(bands))))
    rid_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    return rows, row_ids, widths, block_w, chunk, order, rid_dtype


@hypothesis.settings(
    max_examples=30, deadline=None, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture]
)
@hypothesis.given(case=_cases())
def test_band_kernel_is_right_for_any_ids_and_any_program_order(interp, reversed_programs, case):
    rows, row_ids, widths, block_w, chunk, order, rid_dtype = case
    ids = torch.tensor(row_ids, dtype=rid_dtype)
    bufs = [make_buffer(rows, w, (torch.int32, torch.int64)[k % 2], k) for k, w in enumerate(widths)]
    expected = [expected_after(b, ids) for b in bufs]
    reversed_programs["order"] = list(order)
    reversed_programs["seen"].clear()
    interp.kernel.launch(bufs, ids, block_w=block_w, chunk=chunk)
    if ids.numel():
        assert reversed_programs["seen"] == list(order)
    for got, exp in zip(bufs, expected):
        assert torch.equal(got, exp)
