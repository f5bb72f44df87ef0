"""tirx.FP8ComputeLegalize (llvm, no native fp8) drops the rounding of a float8 buffer the kernel allocates
and decodes float8_e4m3fn inputs without subnormals (0x00 -> 2**-7).  The emulation of the stages before
the pass follows the IR (ml_dtypes is the truth), the stages from it on follow the native build: the zoo
pins the change on the pass and reports it as a TVM finding, not as the emulator's wrong answer."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo


@T.prim_func(s_tir=True)
def _roundtrip(x: T.Buffer((8,), "float32"), out: T.Buffer((8,), "float32")):
    T.func_attr({"tirx.noalias": True})
    t = T.sblock_alloc_buffer((8,), "float8_e4m3fn")
    for i in range(8):
        with T.sblock("q"):
            v = T.axis.spatial(8, i)
            t[v] = T.Cast("float8_e4m3fn", x[v])
    for i in range(8):
        with T.sblock("d"):
            v = T.axis.spatial(8, i)
            out[v] = T.Cast("float32", t[v])


@T.prim_func(s_tir=True)
def _decode(w: T.Buffer((256,), "float8_e4m3fn"), out: T.Buffer((256,), "float32")):
    # 256 seeded values in [-1, 1): some are subnormal in e4m3fn (below 2**-6)
    T.func_attr({"tirx.noalias": True})
    for i in range(256):
        with T.sblock("d"):
            v = T.axis.spatial(256, i)
            out[v] = T.Cast("float32", w[v]) * T.float32(2)


def _inputs(func):
    if func is _roundtrip:
        return np.array([0.27392337, -0.46042657, 0.001, 448.0, 17.0, 3.3, -0.0, 0.75], np.float32)
    return np.arange(256, dtype=np.uint16).astype(np.uint8).view(ml_dtypes.float8_e4m3fn)  # every code


@pytest.mark.parametrize("func, truth", [
    (_roundtrip, lambda x: x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)),
    (_decode, lambda w: w.astype(np.float32) * np.float32(2)),
])
def test_fp8_compute_legalize_changes_results(func, truth):
    x = _inputs(func)
    with np.errstate(invalid="ignore"):
        want = truth(x)
    hm = thn.build(func, target="llvm")
    out = np.zeros(x.shape, np.float32)
    hm.emulate(x.copy(), out, stage=0, mode="exact")
    np.testing.assert_array_equal(out, want)  # the IR as written (NaN codes: NaN)
    native = np.zeros(x.shape, np.float32)
    hm.run_native(x.copy(), native)
    assert not np.array_equal(native, want, equal_nan=True)  # if this fails, TVM fixed FP8ComputeLegalize
    legalized = np.zeros(x.shape, np.float32)
    first = next(s for s in hm.stages if s.name == "tirx.FP8ComputeLegalize")
    hm.emulate(x.copy(), legalized, stage=first.index, mode="exact")
    np.testing.assert_array_equal(legalized, native)


@pytest.mark.parametrize("func", [_roundtrip, _decode])
def test_zoo_reports_fp8_legalize_as_a_tvm_finding(func):
    outcome = zoo.check_kernel("t.fp8", func.with_attr("global_symbol", "main"), "none")
    assert outcome.outcome == "wrong", outcome.reason
    assert f"{zoo.MEANING_CHANGE} " in outcome.reason and "FP8ComputeLegalize" in outcome.reason, outcome.reason
    assert zoo.tvm_finding(outcome) == zoo.TVM_MEANING_FINDINGS["FP8ComputeLegalize"]
