"""A kernel with an ``int4`` parameter (a model whose weights have the native int4 dtype) has no
native reference that means its TIR: TVM's runtime packs int4 two values a byte, its llvm code
loads one value a byte in scalar loads and packs them in vector loads.  The zoo checks it against
the exact emulation of the unscheduled kernel (which itself is checked here against numpy) instead
of reporting the native transfer's refusal as a crash."""
import ml_dtypes
import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo


@T.prim_func(s_tir=True)
def dequant(w: T.Buffer((6, 8), "int4"), s: T.Buffer((6, 1), "float16"), y: T.Buffer((6, 8), "float16")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i, j in T.grid(6, 8):
        with T.sblock("y"):
            vi, vj = T.axis.remap("SS", [i, j])
            y[vi, vj] = T.Cast("float16", w[vi, vj]) * s[vi, 0]


def _weights():
    rng = np.random.default_rng(0)
    return rng.integers(-8, 8, (6, 8)).astype(np.int8), rng.uniform(-1, 1, (6, 1)).astype(np.float16)


@pytest.mark.parametrize("flavour", zoo.FLAVOURS)
def test_int4_parameter_is_checked_against_the_exact_emulation(flavour):
    outcome = zoo.check_kernel("sub_byte.dequant", dequant, flavour, mode="fast", check=True,
                               reference=dequant if flavour == "dlight-gpu" else None)
    assert outcome.outcome == "ok", outcome.reason
    assert "exact emulation of the unscheduled kernel (its int4 parameter w" in outcome.reason
    assert outcome.stages_checked > 1


def test_the_exact_emulation_of_an_int4_kernel_is_numpy():
    w, s = _weights()
    y = np.zeros((6, 8), np.float16)
    thn.build(dequant).emulate(w.astype(ml_dtypes.int4), s, y, mode="exact")
    np.testing.assert_array_equal(y, w.astype(np.float16) * s)


@T.prim_func
def widen_serial(w: T.Buffer((6, 8), "int4"), y: T.Buffer((6, 8), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i, j in T.grid(6, 8):
        y[i, j] = T.Cast("float32", w[i, j])


@T.prim_func
def widen_vectorized(w: T.Buffer((6, 8), "int4"), y: T.Buffer((6, 8), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i in range(6):
        for j in T.vectorized(8):
            y[i, j] = T.Cast("float32", w[i, j])


def test_tvm_int4_layouts_disagree_within_llvm():
    """The evidence: the serial loop reads one value a byte, the same loop vectorised does not."""
    w, _ = _weights()
    answers = []
    for func in (widen_serial, widen_vectorized):
        lib = tvm.tirx.build(tvm.IRModule({"main": func}), target="llvm")
        one_a_byte = tvm.runtime.tensor((w.reshape(-1) & 15).astype(np.uint8), tvm.cpu())._create_view((6, 8), "int4")
        y = tvm.runtime.empty((6, 8), "float32", tvm.cpu())
        lib["main"](one_a_byte, y)
        answers.append(np.array_equal(y.numpy(), w.astype(np.float32)))
    assert answers == [True, False]
