"""The zoo compared float outputs within 8 units in their last place: for float8 that is 100% (e4m3fn,
eps 0.125) or 200% (e5m2), with float8's smallest normal (2**-6) as the absolute tolerance, so a float8
output was never checked: 0.5 against 0.9375 and 0.0137 against 0 compared equal, and TVM's llvm
encoding of float8 subnormals (flushed or garbled by FP8ComputeLegalize) passed as ok.  A float8 value is
a rounding of one computed wider (nothing sums in float8): one unit, and the subnormal step."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from tvm.script import tirx as T

from tvm_hybrid_nb import zoo

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def test_float8_outputs_compare_within_one_unit():
    eq = zoo._outputs_equal
    assert eq([np.array([0.5, -1.0], E4M3)], [np.array([0.9375, -0.5], E4M3)]) is not None
    assert eq([np.array([0.013671875], E4M3)], [np.array([0.0], E4M3)]) is not None
    assert eq([np.array([0.5], E5M2)], [np.array([1.5], E5M2)]) is not None
    # one unit apart (a rounding of a reordered sum) still compares equal
    assert eq([np.array([0.5, 0.001953125], E4M3)], [np.array([0.5625, 0.00390625], E4M3)], reordered=True) is None
    assert eq([np.array([0.5, 7.0], E4M3)], [np.array([0.5, 7.0], E4M3)]) is None
    # wider floats keep their tolerance
    assert eq([np.array([0.5], np.float16)], [np.array([0.5024], np.float16)]) is None


@T.prim_func(s_tir=True)
def _tiny(x: T.Buffer((6, 8), "float32"), out: T.Buffer((6, 8), "float8_e4m3fn")):
    T.func_attr({"tirx.noalias": True})
    for i, j in T.grid(6, 8):
        with T.sblock("q"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = T.Cast("float8_e4m3fn", x[vi, vj] * T.float32(0.01))


def test_float8_subnormal_outputs_are_compared():
    # seeded x in [-1, 1): x * 0.01 is subnormal in e4m3fn; TVM's llvm build encodes most of them wrong
    outcome = zoo.check_kernel("t.tiny", _tiny.with_attr("global_symbol", "main"), "none")
    assert outcome.outcome == "wrong", outcome.reason
    assert "FP8ComputeLegalize" in outcome.reason, outcome.reason


def test_a_float8_cast_does_not_loosen_the_reordered_tolerance():
    class _Stage:
        def __init__(self, f):
            self.function = f

    class _HM:
        stages = [_Stage(_tiny)]
    assert zoo._arithmetic_eps(_HM()) == float(np.finfo(np.float32).eps)
