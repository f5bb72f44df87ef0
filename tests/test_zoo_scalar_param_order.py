"""A kernel whose symbolic sizes are scalar parameters (shapes 2 * n and m + n name no size alone) may list them
``(n, m)`` in one lowering and ``(m, n)`` in the other (gqachunk16.matmul2: the GQA scores @ V of a chunked
prefill).  The two are then distinct kernels, and the cuda one is checked against its llvm twin: the zoo
passed the twin's inputs by position, binding m to n's value, and crashed (ArgumentShapeError) or, where
only m + n matters, compared by luck.  Inputs are now passed by parameter name."""
from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm.script import tirx as T

from tvm_hybrid_nb import zoo


@T.prim_func(s_tir=True)
def _scores_v(a: T.handle, b: T.handle, n: T.int64, m: T.int64, c: T.handle):
    A = T.match_buffer(a, (T.int64(2) * n, m + n), "float32")
    B = T.match_buffer(b, (m + n, T.int64(4)), "float32")
    C = T.match_buffer(c, (T.int64(2) * n, T.int64(4)), "float32")
    for i, j, k in T.grid(T.int64(2) * n, T.int64(4), m + n):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@T.prim_func(s_tir=True)
def _scores_v_renamed(x: T.handle, y: T.handle, m: T.int64, n: T.int64, z: T.handle):
    """The same kernel as the other lowering names it: other buffer names, scalars (m, n)."""
    X = T.match_buffer(x, (T.int64(2) * n, m + n), "float32")
    Y = T.match_buffer(y, (m + n, T.int64(4)), "float32")
    Z = T.match_buffer(z, (T.int64(2) * n, T.int64(4)), "float32")
    for i, j, k in T.grid(T.int64(2) * n, T.int64(4), m + n):
        with T.sblock("matmul"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                Z[vi, vj] = T.float32(0)
            Z[vi, vj] = Z[vi, vj] + X[vi, vk] * Y[vk, vj]


def _swapped(func):
    """``func`` with its two scalar parameters in the other order (what the other lowering produced)."""
    a, b, n, m, c = func.params
    return tvm.tirx.PrimFunc([a, b, m, n, c], func.body, func.ret_type, func.attrs)


def test_twin_with_scalar_parameters_in_another_order_is_checked_by_name():
    twin = _swapped(_scores_v).with_attr("global_symbol", "main")
    reference = _scores_v.with_attr("global_symbol", "main")
    assert not tvm_ffi.structural_equal(twin, reference)
    for flavour in ("none", "dlight-cpu"):
        outcome = zoo.check_kernel("order.matmul", twin, flavour, reference=reference)
        assert outcome.outcome == "ok", (flavour, outcome.stage, outcome.reason)


def test_twin_with_other_buffer_names_and_scalar_order():
    twin = _scores_v_renamed.with_attr("global_symbol", "main")
    outcome = zoo.check_kernel("order.matmul", twin, "none", reference=_scores_v.with_attr("global_symbol", "main"))
    assert outcome.outcome == "ok", (outcome.stage, outcome.reason)


def test_the_swapped_kernel_emulates_numpy():
    """Independent truth: the swapped kernel, inputs bound by name (m = 3, n = 5), against numpy."""
    from tvm_hybrid_nb import module as hmodule

    hm = hmodule.build(_swapped(_scores_v), target="llvm")
    assert [p.name for p in hm.params][2:4] == ["m", "n"]
    rng = np.random.default_rng(0)
    m, n = 3, 5
    A = rng.standard_normal((2 * n, m + n)).astype("float32")
    B = rng.standard_normal((m + n, 4)).astype("float32")
    C = np.zeros((2 * n, 4), "float32")
    hm.emulate(A, B, m, n, C, mode="exact")
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-6)
