"""TIR's float ``Min``/``Max`` on CUDA: TVM prints them as ``min``/``max``, which for float and double
are CUDA's ``fminf``/``fmaxf`` (``fmin``/``fmax``): a NaN on one side gives the other side.  TVM's own
``max(half, half)`` (and nv_bfloat16's) is ``a > b ? a : b``, and its llvm code is that select for
every type, so NaN picks the second operand there.  A GPU row max over a row holding NaN is the largest
number (the reduction's initial value for an all-NaN row); the llvm build of the same kernel gives NaN.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te
from tvm.relax.frontend import nn
from tvm.script import tirx as T

from tvm_hybrid_nb import module as hmodule
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.zoo_reference import CUDA_REFERENCE

N = 64


@T.prim_func
def min_max(A: T.Buffer((64,), "float32"), H: T.Buffer((64,), "float16"), D: T.Buffer((64,), "float64"),
            B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float16"), E: T.Buffer((64,), "float64")):
    for i in T.thread_binding(64, thread="threadIdx.x"):
        B[i] = T.max(A[i], A[63 - i]) + T.min(A[i], T.float32(0))
        C[i] = T.max(H[i], H[63 - i]) + T.min(T.float16(1), H[i])
        E[i] = T.min(D[i], D[63 - i])


def _inputs():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(N).astype(np.float32)
    a[[3, 10, 60]] = np.nan  # a[3] meets a[60]: both NaN
    h, d = a.astype(np.float16), a.astype(np.float64)
    return a, h, d


def _select_max(a, b):
    return np.where(a > b, a, b)


def _select_min(a, b):
    return np.where(a < b, a, b)


def _check(hm, expected, stages):
    for stage in stages:
        for mode in ("exact", "fast"):
            a, h, d = _inputs()
            outs = [np.zeros(N, np.float32), np.zeros(N, np.float16), np.zeros(N, np.float64)]
            hm.emulate(a, h, d, *outs, stage=stage.index, mode=mode)
            for got, want in zip(outs, expected):
                np.testing.assert_array_equal(got, want, err_msg=f"{stage.label} {mode}")


def _changed(hm):
    return [s for s in hm.stages if s.changed and (hm.packed_api_index is None or s.index < hm.packed_api_index)]


def test_cuda_float_min_max_ignore_nan_and_half_keeps_tvms_select():
    a, h, d = _inputs()
    ra, rh, rd = a[::-1], h[::-1], d[::-1]
    expected = [np.fmax(a, ra) + np.fmin(a, np.float32(0)),
                _select_max(h, rh) + _select_min(np.float16(1), h),
                np.fmin(d, rd)]
    assert np.isnan(expected[0][3]) and not np.isnan(expected[0][10])  # fmax(NaN, x) is x
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    mod = tvm.IRModule({"main": min_max})
    source = "\n".join(m.inspect_source() for m in tvm.tirx.build(mod, target=target).imports)
    assert "max(A_ptr[" in source or "max(A[" in source  # CUDA's max(float, float): fmaxf
    assert "return __hgt(__half(a), __half(b)) ? a : b;" in source  # TVM's max(half, half)
    hm = hmodule.build(mod, target=target)
    _check(hm, expected, _changed(hm))


@T.prim_func
def min_max_serial(A: T.Buffer((64,), "float32"), H: T.Buffer((64,), "float16"), D: T.Buffer((64,), "float64"),
                   B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float16"), E: T.Buffer((64,), "float64")):
    for i in range(64):  # min_max's body in a serial loop: an llvm kernel
        B[i] = T.max(A[i], A[63 - i]) + T.min(A[i], T.float32(0))
        C[i] = T.max(H[i], H[63 - i]) + T.min(T.float16(1), H[i])
        E[i] = T.min(D[i], D[63 - i])


def test_llvm_min_max_pick_the_second_operand_on_nan_as_the_native_build():
    a, h, d = _inputs()
    hm = hmodule.build(min_max_serial, target="llvm")
    native = [np.zeros(N, np.float32), np.zeros(N, np.float16), np.zeros(N, np.float64)]
    hm.run_native(a, h, d, *native)
    ra, rh, rd = a[::-1], h[::-1], d[::-1]
    expected = [_select_max(a, ra) + _select_min(a, np.float32(0)),
                _select_max(h, rh) + _select_min(np.float16(1), h),
                _select_min(d, rd)]
    for got, want in zip(native, expected):
        np.testing.assert_array_equal(got, want)
    _check(hm, native, _changed(hm))


class RowMax(nn.Module):
    def forward(self, x):
        return nn.op.max(x, axis=-1)


@pytest.fixture(scope="module")
def row_max():
    (kernel,) = zoo.collect_kernels([("row_max", RowMax(), {"x": nn.spec.Tensor((4, N), "float32")})])
    return kernel


def _nan_rows(x):
    x[0, 5] = x[1, :] = x[2, N - 1] = x[3, 0] = np.nan
    return x


def _row_max_across_threads(rows: int, width: int):
    """A row max of a (rows, width) float32 array, each row reduced by 32 threads (as dlight's
    reductions are): LowerCrossThreadReduction and LowerThreadAllreduce lower it."""
    a = te.placeholder((rows, width), "float32", name="A")
    k = te.reduce_axis((0, width), name="k")
    b = te.compute((rows,), lambda i: te.max(a[i, k], axis=k), name="B")
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    i, kk = sch.get_loops(sch.get_sblock("B"))
    sch.bind(i, "blockIdx.x")
    sch.bind(sch.split(kk, [None, 32])[1], "threadIdx.x")
    return hmodule.build(sch.mod, target=tvm.target.Target({"kind": "cuda", "arch": "sm_80"}))


def test_a_row_max_over_nan_across_threads_is_the_largest_number_at_every_stage():
    x = _nan_rows(np.random.default_rng(1).standard_normal((4, N)).astype(np.float32))
    lowest = np.float32(np.finfo(np.float32).min)  # te.max starts from it
    on_gpu = np.fmax.reduce(np.concatenate([np.full((4, 1), lowest), x], axis=1), axis=1)
    assert on_gpu[1] == lowest and not np.isnan(on_gpu).any()
    hm = _row_max_across_threads(4, N)
    stages = _changed(hm)
    assert {"s_tir.LowerCrossThreadReduction", "s_tir.LowerThreadAllreduce"} <= {s.name for s in stages}
    for stage in stages:
        for mode in ("exact", "fast"):
            out = np.zeros(4, np.float32)
            hm.emulate(x.copy(), out, stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, on_gpu, err_msg=f"{stage.label} {mode}")


def test_the_zoo_compares_a_gpu_kernel_with_the_unscheduled_kernels_meaning_on_cuda(row_max, monkeypatch):
    # dlight gives this row max one thread a row (its Fallback rule): its llvm build gives NaN for
    # rows 1 and 2, the GPU kernel the largest number.
    native = np.zeros(4, np.float32)
    x = _nan_rows(np.random.default_rng(1).standard_normal((4, N)).astype(np.float32))
    hmodule.build(row_max.llvm, target="llvm").run_native(x, native)
    assert np.isnan(native[[1, 2]]).all() and not np.isnan(native[[0, 3]]).any()
    seeded = zoo._inputs
    monkeypatch.setattr(zoo, "_inputs", lambda *args, **kw: [_nan_rows(a) if a.ndim == 2 else a
                                                              for a in seeded(*args, **kw)])
    gpu = zoo.check_kernel(row_max.name, row_max.cuda, "dlight-gpu", reference=row_max.reference, check=True)
    assert gpu.outcome == "ok" and gpu.reason == CUDA_REFERENCE, gpu
    assert gpu.stages_checked > 5
    for flavour in ("none", "dlight-cpu"):  # llvm kernels: the llvm build stays the reference
        outcome = zoo.check_kernel(row_max.name, row_max.llvm, flavour, check=True)
        assert outcome.outcome == "ok" and CUDA_REFERENCE not in outcome.reason, outcome
