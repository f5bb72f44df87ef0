"""TIR `!=` on floats with a NaN operand: TVM's llvm backend emits `fcmp one` (ordered: false when a side
is NaN), its CUDA backend C's `!=` (unordered: true).  The emulation of a CPU kernel must give the native
build's answer; the emulation of a GPU kernel C's."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn


@T.prim_func(s_tir=True)
def _ne(a: T.Buffer((16,), "float32"), b: T.Buffer((16,), "float32"), out: T.Buffer((16,), "int32")):
    for i in range(16):
        with T.sblock("ne"):
            v = T.axis.spatial(16, i)
            out[v] = T.Cast("int32", a[v] != b[v])


@T.prim_func(s_tir=True)
def _ne_vector(a: T.Buffer((16,), "float32"), b: T.Buffer((16,), "float32"), out: T.Buffer((16,), "int32")):
    for i in T.vectorized(16):
        with T.sblock("ne"):
            v = T.axis.spatial(16, i)
            out[v] = T.Cast("int32", a[v] != b[v])


@T.prim_func(s_tir=True)
def _ne_scalar_select(a: T.Buffer((1,), "float16"), out: T.Buffer((1,), "float16")):
    with T.sblock("ne"):
        out[0] = T.Select(a[0] != T.float16(1), a[0], T.float16(7))


def _operands():
    a = np.array([np.nan, 1, np.nan, 2, 0, -0.0, np.inf, 1, np.nan, -np.inf, 3, np.nan, 5, 6, -1, 0], np.float32)
    b = np.array([np.nan, np.nan, 1, 2, -0.0, 0, np.inf, 2, 0, -np.inf, np.nan, 4, 5, 7, -1, np.nan], np.float32)
    return a, b


@pytest.mark.parametrize("func", [_ne, _ne_vector])
def test_cpu_float_ne_is_ordered_like_the_native_build(func):
    a, b = _operands()
    ordered = ((a < b) | (a > b)).astype(np.int32)  # LLVM's `fcmp one`
    hm = thn.build(func, target="llvm")
    native = np.zeros(16, np.int32)
    hm.run_native(a.copy(), b.copy(), native)
    np.testing.assert_array_equal(native, ordered)  # if this fails, TVM changed its codegen
    for stage in (0, len(hm.stages) - 1):
        for mode in ("exact", "fast"):
            got = np.zeros(16, np.int32)
            if hm.packed_api_index is not None and stage >= hm.packed_api_index:
                stage = hm.packed_api_index - 1
            hm.emulate(a.copy(), b.copy(), got, stage=stage, mode=mode)
            np.testing.assert_array_equal(got, native)


def test_scalar_float16_ne_against_nan_is_false_on_cpu():
    hm = thn.build(_ne_scalar_select, target="llvm")
    a = np.array([np.nan], np.float16)
    native, got = np.zeros(1, np.float16), np.zeros(1, np.float16)
    hm.run_native(a.copy(), native)
    hm.emulate(a.copy(), got, stage=0, mode="exact")
    assert native[0] == 7 and got[0] == 7


def test_gpu_float_ne_is_c_unordered():
    from tvm.s_tir import dlight as dl

    a, b = _operands()
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    with target:
        mod = dl.ApplyDefaultSchedule(dl.gpu.Fallback())(tvm.IRModule({"main": _ne}))
    src = tvm.compile(mod, target=target).mod.imports[0].inspect_source()
    assert "!=" in src  # C's unordered comparison in the CUDA source
    hm = thn.build(mod, target=target)
    for stage in (0, hm.packed_api_index - 1):
        got = np.zeros(16, np.int32)
        hm.emulate(a.copy(), b.copy(), got, stage=stage, mode="fast")
        np.testing.assert_array_equal(got, (a != b).astype(np.int32))


def test_the_zoo_compares_a_gpu_ne_of_nan_with_the_kernels_meaning_on_cuda(monkeypatch):
    # dlight's GPU schedule of `_ne`: the llvm build says NaN != NaN is false, the GPU kernel true;
    # the zoo compares the GPU kernel with the unscheduled kernel's exact emulation on CUDA there.
    from tvm_hybrid_nb import zoo
    from tvm_hybrid_nb.zoo_reference import CUDA_REFERENCE

    seeded = zoo._inputs

    def with_nan(*args, **kw):
        values = seeded(*args, **kw)
        for v in values[:2]:
            v[:3] = np.nan
        return values

    monkeypatch.setattr(zoo, "_inputs", with_nan)
    func = _ne.with_attr("global_symbol", "main")
    gpu = zoo.check_kernel("ne", func, "dlight-gpu", check=True)
    assert gpu.outcome == "ok" and gpu.reason == CUDA_REFERENCE, gpu
    assert gpu.stages_checked > 5
    assert zoo.check_kernel("ne", func, "none", check=True).outcome == "ok"
    wrong = thn.build(func, target="llvm")  # the llvm build: false where a side is NaN
    a, b = with_nan(wrong.params, 0)[:2]
    out = np.zeros(16, np.int32)
    wrong.run_native(a, b, out)
    assert (out[:3] == 0).all()
