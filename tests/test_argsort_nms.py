"""``tvm.contrib.sort.argsort_nms`` (``topi.argsort`` with a ``valid_count``; relax's CPU
``vision.non_max_suppression`` calls it) is emulated exactly: each row's first ``count`` values
sorted stably, the row's other positions their own index.  Its counts address memory, so a count
past the row's length is an out-of-bounds read (the native run is refused before it starts), and
the zoo's seeded inputs draw counts in [0, row length]."""
import numpy as np
import pytest
from tvm import te, topi

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.errors import EmulationError
from tvm_hybrid_nb.runtime import argsort_nms

from test_constructs import check_every_stage


def _nms_argsort(axis, ascend, shape=(3, 9)):
    data = te.placeholder(shape, "float32", name="data")
    counts = te.placeholder((shape[1 - axis],), "int32", name="valid_count")
    out = topi.argsort(data, valid_count=counts, axis=axis, is_ascend=ascend, dtype="int32")
    return te.create_prim_func([data, counts, out])


def _expected(data, counts, axis, ascend):
    """Per row, numpy's stable argsort of its first ``count`` values (descending: of the negated values)."""
    rows = np.moveaxis(data, axis, -1)
    want = np.broadcast_to(np.arange(rows.shape[-1], dtype=np.int32), rows.shape).copy()
    for r, count in enumerate(counts):
        if count > 0:
            keys = rows[r, :count] if ascend else -rows[r, :count]
            want[r, :count] = np.argsort(keys, kind="stable")
    return np.moveaxis(want, -1, axis)


@pytest.mark.parametrize("axis, ascend", [(1, False), (1, True), (0, False)])
def test_each_row_sorts_its_first_count_values_stably(axis, ascend):
    data = np.random.default_rng(3).integers(-2, 3, (3, 9)).astype("float32")  # many ties
    counts = np.array([0, 9, 4] if axis == 1 else [2, 3, 0, 1, 3, 3, -1, 0, 2], "int32")
    out = np.zeros((3, 9), "int32")
    hm = check_every_stage(_nms_argsort(axis, ascend), [data, counts, out])  # equal to the native run
    got = [data, counts, out.copy()]
    hm.emulate(*got)
    np.testing.assert_array_equal(got[2], _expected(data, counts, axis, ascend))


def test_a_count_past_the_row_is_an_out_of_bounds_read_and_no_native_run():
    hm = thn.build(_nms_argsort(1, False))
    args = [np.ones((3, 9), "float32"), np.array([2, 10, 1], "int32"), np.zeros((3, 9), "int32")]
    with pytest.raises(EmulationError, match=r"out-of-bounds read: .*argsort_nms sorts a row's first 10 values"):
        hm.emulate(*args)
    with pytest.raises(EmulationError, match="native run refused"):
        hm.run_native(*args)
    with pytest.raises(ValueError, match="float32 data, int32 counts"):
        argsort_nms(np.ones((2, 3), "float64"), np.ones(2, "int32"), np.zeros((2, 3), "int32"), 1, True)


def test_seeded_inputs_draw_counts_within_the_row():
    hm = thn.build(_nms_argsort(1, False, shape=(40, 6)))
    assert hm.params[1].index_extent == 7
    outcome = zoo.check_kernel("t.argsort_nms", _nms_argsort(1, False, shape=(40, 6)), "none", check=True)
    assert outcome.outcome == "ok", outcome
