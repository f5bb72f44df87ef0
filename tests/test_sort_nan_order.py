"""Sorting NaN with TVM's runtime sort (``tvm.contrib.sort``): the C++ library's ``std::stable_sort``
with ``<`` does not order NaN, so the native order of a row holding NaN is unspecified (it may leave
other values of the row unsorted).  The emulation says which result elements depend on it
(:class:`UndefinedResultError`, as for LLVM poison) and stays exact everywhere else; the zoo compares
the defined elements only, also for a GPU sort network checked against the CPU library."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import spec
from tvm.relax.frontend.nn.core import wrap_nested

from tvm_hybrid_nb import module as hmodule
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.errors import UndefinedResultError
from tvm_hybrid_nb.runtime import _stable_order


class _TopTwo(nn.Module):
    def forward(self, x):
        found = relax.op.topk(x._expr, k=2, axis=1, ret_type="both", largest=True, dtype="int64")
        return wrap_nested(found[0], "values"), wrap_nested(found[1], "indices")


@pytest.fixture(scope="module")
def top_two_kernels():
    """The CPU kernel (TVM's runtime sort) and the GPU one (a sort network in TIR) of one topk."""
    kernels = zoo.collect_kernels([("top_two", _TopTwo(), {"x": spec.Tensor((3, 4), "float32")})])
    return ([k for k in kernels if k.llvm is not None][0], [k for k in kernels if k.cuda is not None][0])


@pytest.fixture(scope="module")
def top_two(top_two_kernels):
    return top_two_kernels[0]


ROWS = np.array([[0.5, 2.0, -1.0, 3.0], [0.25, np.nan, 0.75, 0.5], [1.0, 1.0, 0.0, 2.0]], np.float32)


def test_a_row_holding_nan_is_undefined_and_the_other_rows_are_exact(top_two):
    native = hmodule.build(top_two.reference, target="llvm")
    want = [ROWS.copy(), np.zeros((3, 2), np.float32), np.zeros((3, 2), np.int64)]
    native.run_native(*want)
    order = np.argsort(-ROWS[[0, 2]], axis=1, kind="stable")[:, :2]  # numpy: the rows without NaN
    np.testing.assert_array_equal(want[2][[0, 2]], order)
    for mode in ("exact", "fast"):
        args = [ROWS.copy(), np.zeros((3, 2), np.float32), np.zeros((3, 2), np.int64)]
        with pytest.raises(UndefinedResultError, match=r"\[1, 0\] is undefined .*order of NaN in a sort "
                                                       r"\(tvm.contrib.sort.topk") as caught:
            native.emulate(*args, mode=mode, check=True)
        for mask in caught.value.undefined:
            np.testing.assert_array_equal(mask, np.array([[False] * 2, [True] * 2, [False] * 2]))
        for got, expected in zip(caught.value.results, want[1:]):
            np.testing.assert_array_equal(got[[0, 2]], expected[[0, 2]])


def test_the_zoo_compares_the_defined_elements_of_the_cpu_library_and_the_gpu_network(top_two_kernels, monkeypatch):
    seeded = zoo._inputs

    def with_nan(params, seed, name, narrow=False):
        inputs = seeded(params, seed, name, narrow=narrow)
        for a, p in zip(inputs, params):
            if isinstance(a, np.ndarray) and not p.is_output and a.dtype.kind == "f":
                a[1, 1] = np.nan
        return inputs

    monkeypatch.setattr(zoo, "_inputs", with_nan)
    cpu, gpu = top_two_kernels
    for flavour, kernel, func in (("none", cpu, cpu.llvm), ("dlight-gpu", gpu, gpu.cuda)):
        outcome = zoo.check_kernel(kernel.name, func, flavour, reference=kernel.reference, check=True)
        assert outcome.outcome == "ok", outcome
        assert f"{zoo.UNDEFINED_NOT_COMPARED}: 4" in outcome.reason and "NaN" in outcome.reason, outcome.reason


def test_each_nan_policy_orders_only_the_rows_holding_nan_otherwise():
    data = np.array([[3.0, np.nan, 1.0, 2.0], [4.0, 3.0, 2.0, 1.0]], np.float32)
    with pytest.raises(ValueError, match="sorting NaN"):
        _stable_order(data, 1, True)
    orders = {policy: _stable_order(data, 1, ascend, policy)
              for policy in ("native", "min", "max", "zero") for ascend in (True,)}
    for order in orders.values():
        np.testing.assert_array_equal(order[1], [3, 2, 1, 0])
    np.testing.assert_array_equal(orders["native"][0], [2, 3, 0, 1])
    np.testing.assert_array_equal(orders["min"][0], [1, 2, 3, 0])
    np.testing.assert_array_equal(orders["max"][0], [1, 0, 3, 2])
    np.testing.assert_array_equal(orders["zero"][0], [0, 1, 2, 3])
    descending = _stable_order(data, 1, False, "native")
    np.testing.assert_array_equal(descending[1], [0, 1, 2, 3])
