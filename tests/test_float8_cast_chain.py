"""``T.Cast("float32", T.Cast("float8_e4m3fn", x))`` rounds x to float8.  The emulator drops a float cast
pair that widens and narrows back (LLVM does), and took float8_e4m3fn for an 843-bit float (the digits of
its name run together), so it dropped the pair as a widening: the float8 rounding vanished (0.2739 stayed
0.2739, e4m3fn gives 0.28125).  dlight's GPU schedules inline the cast into its consumer, so every
relax ``astype`` round trip through float8 in a dlight-gpu kernel had this form."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen.names import _float_bits


@T.prim_func(s_tir=True)
def _e4m3_roundtrip(x: T.Buffer((8,), "float32"), out: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.sblock("rt"):
            v = T.axis.spatial(8, i)
            out[v] = T.Cast("float32", T.Cast("float8_e4m3fn", x[v]))


@T.prim_func(s_tir=True)
def _e5m2_roundtrip(x: T.Buffer((8,), "float16"), out: T.Buffer((8,), "float16")):
    for i in range(8):
        with T.sblock("rt"):
            v = T.axis.spatial(8, i)
            out[v] = T.Cast("float16", T.Cast("float8_e5m2", x[v]))


@T.prim_func(s_tir=True)
def _f16_widened(x: T.Buffer((8,), "float16"), out: T.Buffer((8,), "float16")):
    for i in range(8):
        with T.sblock("rt"):
            v = T.axis.spatial(8, i)
            out[v] = T.Cast("float16", T.Cast("float32", x[v]))


@pytest.mark.parametrize("mode", ["exact", "fast"])
@pytest.mark.parametrize("func, dtype, fp8", [(_e4m3_roundtrip, np.float32, ml_dtypes.float8_e4m3fn),
                                              (_e5m2_roundtrip, np.float16, ml_dtypes.float8_e5m2),
                                              (_f16_widened, np.float16, None)])
def test_a_narrowing_float_cast_pair_rounds(func, dtype, fp8, mode):
    x = np.array([0.27392337, -0.46042657, 0.7, 0.001, 3.3, 17.0, -0.0, 100.0], dtype)
    want = x if fp8 is None else x.astype(fp8).astype(dtype)
    out = np.zeros(8, dtype)
    thn.build(func, target="llvm").emulate(x.copy(), out, stage=0, mode=mode)
    np.testing.assert_array_equal(out, want)


def test_float_bits_of_narrow_float_names():
    assert [_float_bits(d) for d in ("float8_e4m3fn", "float8_e5m2x4", "float4_e2m1fn", "bfloat16", "float16x8",
                                     "int64", "uint8")] == [8, 8, 4, 16, 16, 64, 8]
