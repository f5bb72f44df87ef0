"""A cross-thread min/max of values holding NaN: ``select(a < b, a, b)`` is not associative once a
NaN is among the values, and the TIR between LowerCrossThreadReduction and LowerThreadAllreduce
leaves the order of ``tvm_thread_allreduce`` open.  The emulation says which results depend on it
(:class:`UndefinedResultError`, the other rows exact), LowerThreadAllreduce's stage computes TVM's
own shuffle tree, and the zoo compares the defined elements only (a MetaSchedule sample of a row
min over NaN rows was called wrong: the emulator folded in thread order, a value no GPU gives).
The kernels are float16: TVM's CUDA ``min(half, half)`` is that select, while float32's is CUDA's
``fminf``, which ignores NaN in every order (``tests/test_cuda_float_min_max.py``)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_hybrid_nb import module as hmodule
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.errors import UndefinedResultError
from tvm_hybrid_nb.runtime import _fold_order

ROWS = np.array([[np.nan, 0.85226685, 0.2879643, np.nan, np.nan], [3, 1, 2, 5, 4]], np.float16)


def _across_threads(reduce=te.min):
    """A row ``reduce`` (te.min, te.sum) of a (2, 5) float16 array, each row over 32 threads."""
    a = te.placeholder((2, 5), "float16", name="A")
    k = te.reduce_axis((0, 5), name="k")
    b = te.compute((2,), lambda i: reduce(a[i, k], axis=k), name="B")
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    i, kk = sch.get_loops(sch.get_sblock("B"))
    sch.bind(i, "blockIdx.x")
    sch.bind(sch.split(kk, [None, 32])[1], "threadIdx.x")
    return hmodule.build(sch.mod, target=tvm.target.Target("nvidia/nvidia-a100"))


def _tree_min(row, extent=32):
    """TVM's shuffle tree (value i combined with value i + offset, halving offsets) over ``extent``
    threads, the idle ones holding the identity, under select(a < b, a, b)."""
    v = list(row) + [np.finfo(row.dtype).max] * (extent - len(row))
    offset = extent // 2
    while offset:
        v = [v[i] if v[i] < v[i + offset] else v[i + offset] for i in range(offset)]
        offset //= 2
    return v[0]


def test_the_open_order_is_said_and_lowerthreadallreduce_computes_tvms_tree():
    hm = _across_threads()
    cross = hm.stage("s_tir.LowerCrossThreadReduction").index
    lowered = hm.stage("s_tir.LowerThreadAllreduce").index
    for mode in ("exact", "fast"):
        b = np.zeros(2, np.float16)
        hm.emulate(ROWS.copy(), b, stage=0, mode=mode)  # the serial loop: one order, defined
        assert np.isnan(b[0]) and b[1] == 1
        with pytest.raises(UndefinedResultError, match=r"B\[0\] is undefined .*tvm_thread_allreduce") as caught:
            hm.emulate(ROWS.copy(), np.zeros(2, np.float16), stage=cross, mode=mode)
        np.testing.assert_array_equal(caught.value.undefined[0], [True, False])
        assert caught.value.results[0][1] == 1
        b = np.zeros(2, np.float16)
        hm.emulate(ROWS.copy(), b, stage=lowered, mode=mode)
        np.testing.assert_array_equal(b, [_tree_min(ROWS[0]), 1])
    assert _tree_min(ROWS[0]) == np.float16(0.2879643)


def test_a_sum_of_nan_is_nan_in_every_order_and_stays_defined():
    hm = _across_threads(te.sum)
    out = np.zeros(2, np.float16)
    hm.emulate(ROWS.copy(), out, stage="s_tir.LowerCrossThreadReduction", mode="fast")
    assert np.isnan(out[0]) and out[1] == 15


def test_each_fold_order_combines_every_thread_once():
    for count in (1, 2, 5, 8, 13, 32):
        for policy in ("native", "min", "max", "zero"):
            pairs = _fold_order(count, policy)
            assert len(pairs) == count - 1
            assert sorted(b for _, b in pairs) == sorted(set(range(count)) - {pairs[-1][0] if pairs else 0})


def test_the_zoo_compares_the_rows_without_nan_at_every_stage():
    # The native llvm build of the unscheduled kernel gives the serial loop's NaN; every stage of the
    # cross-thread schedule is compared on the row without NaN, also after LowerThreadAllreduce
    # fixed the shuffle tree's order (0.2878 there).
    a = te.placeholder((2, 5), "float16", name="A")
    k = te.reduce_axis((0, 5), name="k")
    native = hmodule.build(te.create_prim_func([a, te.compute((2,), lambda i: te.min(a[i, k], axis=k), name="B")]))
    expected = np.zeros(2, np.float16)
    native.run_native(ROWS.copy(), expected)
    assert np.isnan(expected[0]) and expected[1] == 1
    hm = _across_threads()
    outcome = zoo.KernelOutcome("dlight-gpu", "row_min", "ok")
    zoo.emulate_stages(hm, [ROWS.copy(), np.zeros(2, np.float16)], [expected], outcome, check=True)
    assert outcome.outcome == "ok" and outcome.stages_checked > 10, outcome
    assert f"{zoo.UNDEFINED_NOT_COMPARED}: 1 (the order in which tvm_thread_allreduce" in outcome.reason
    wrong = np.array([np.nan, 2], np.float16)  # the defined row is still compared
    outcome = zoo.KernelOutcome("dlight-gpu", "row_min", "ok")
    zoo.emulate_stages(hm, [ROWS.copy(), np.zeros(2, np.float16)], [wrong], outcome, check=True)
    assert outcome.outcome == "wrong", outcome
