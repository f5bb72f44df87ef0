"""Out-of-range float -> integer conversions: LLVM makes them poison, so a result that depends on one
is undefined (the emulation says which elements), and a converted value that is discarded is no error."""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import runtime, zoo
from tvm_hybrid_nb.bisect import find_first_divergence
from tvm_hybrid_nb.errors import UndefinedResultError

MODES = ("exact", "fast")


@T.prim_func
def _scaled_to_int8(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "int8")):
    for i in range(16):
        B[i] = T.Cast("int8", A[i] * T.float32(200))


@T.prim_func
def _log_bucket(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "int32")):
    # T5's relative position bucket: log(0) = -inf is converted, then discarded by the Select.
    for i in range(16):
        B[i] = T.Select(A[i] < T.float32(1), T.int32(0), T.Cast("int32", T.log(A[i]) * T.float32(4)))


def _undefined_int8(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x.astype("float64") * 200)
    return (t < -128) | (t > 127)


def test_a_result_from_an_out_of_range_conversion_is_reported_undefined_element_by_element():
    hm = thn.build(_scaled_to_int8)
    x = np.linspace(-2.5, 2.5, 16).astype("float32")
    undefined = _undefined_int8(x)
    assert 0 < undefined.sum() < 16
    for mode in MODES:
        with pytest.raises(UndefinedResultError, match=r"B\[0\] is undefined on these inputs .*float32 -> int8.*"
                                                       r"poison") as caught:
            hm.emulate(x, np.zeros(16, "int8"), mode=mode)
        np.testing.assert_array_equal(caught.value.undefined[0], undefined)
        defined = caught.value.results[0][~undefined]
        np.testing.assert_array_equal(defined, np.trunc(x[~undefined] * np.float32(200)).astype("int8"))
    # The module survives: in-range inputs emulate as the native kernel runs them.
    small = (x / 5).astype("float32")
    for mode in MODES:
        np.testing.assert_array_equal(hm.emulate(small, np.zeros(16, "int8"), mode=mode),
                                      hm.run_native(small, np.zeros(16, "int8")))


def test_a_discarded_out_of_range_conversion_is_no_error():
    hm = thn.build(_log_bucket)
    x = np.array([0, 0.5, 2, 1e3] * 4, "float32")  # log(0) and log(0.5) are converted, then not selected
    expected = np.where(x < 1, 0, np.trunc(np.log(np.maximum(x, 1)) * 4)).astype("int32")
    np.testing.assert_array_equal(hm.run_native(x, np.zeros(16, "int32")), expected)
    for mode in MODES:
        np.testing.assert_array_equal(hm.emulate(x, np.zeros(16, "int32"), mode=mode), expected)


@pytest.mark.parametrize("policy, expected", [("native", [127, -128, -1, 5]), ("min", [-128, -128, -1, 5]),
                                              ("max", [127, 127, -1, 5]), ("zero", [0, 0, -1, 5])])
def test_the_values_each_policy_gives_out_of_range_conversions(policy, expected):
    record = runtime.OutOfRangeConversions(policy)
    x = np.array([300.0, np.nan, -1.5, 5.9], "float32")
    got = record.convert(x, runtime.cast(x, "int8"), "int8")  # cast alone: the x86 model
    np.testing.assert_array_equal(got, np.array(expected, "int8"))
    assert record.first == (300.0, "float32", "int8")
    with pytest.raises(ValueError, match="policy"):
        runtime.OutOfRangeConversions("wrap")


def test_the_zoo_compares_only_the_defined_elements():
    outcome = zoo.check_kernel("undefined.scaled_to_int8", _scaled_to_int8, "none", mode="fast")
    inputs = zoo._inputs(thn.build(_scaled_to_int8).params, 0, "undefined.scaled_to_int8")
    count = int(_undefined_int8(inputs[0]).sum())
    assert count > 0
    assert outcome.outcome == "ok", outcome.reason
    assert f"{zoo.UNDEFINED_NOT_COMPARED}: {count} " in outcome.reason


def test_bisection_reports_undefined_results_as_such():
    hm = thn.build(_scaled_to_int8)
    x = np.linspace(-2.5, 2.5, 16).astype("float32")
    found = find_first_divergence(hm, x, np.zeros(16, "int8"))
    assert found.undefined and "is undefined" in found.error
