"""A symbolic size of 0 (an empty KV cache, an empty batch, a sequence shifted by one of length 1)
makes loops of zero trips, which the native kernel runs without touching memory.  Fast mode once
crashed there: a zero divisor of index arithmetic over no lanes (``floormod(i, n)`` of a reshape),
empty lane views, the thread count of a cross-thread reduction, per-thread rows of an empty
allocation, and a false "never written" alarm of a softmax over an empty row, whose row maximum was
read for columns that do not exist.  Each kernel here is checked at n = 0 (and n = 1) in the three
flavours against its native build, and run natively at n = 0.  A mean over an empty axis reads a
sum that TVM never initialises (its init sits in the zero-trip loop): that alarm is TVM's, said with
the loop extents as evidence (``zoo_undefined.zero_trip_evidence``); so is topi's cumsum of an empty
axis, whose first store divides by the axis length or, along the first axis, writes the empty
output (``refused_reference_evidence``)."""
import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.runtime._numerics import floordiv, floormod
from tvm_hybrid_nb.zoo_undefined import refused_reference_evidence, zero_trip_evidence


@T.prim_func(s_tir=True)
def reshape(a: T.handle, b: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, T.int64(2), T.int64(4)), "float32")
    B = T.match_buffer(b, (n, T.int64(8)), "float32")
    T.func_attr({"tirx.noalias": True, "global_symbol": "main"})
    for i, j in T.grid(n, T.int64(8)):
        with T.sblock("R"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[(vj // T.int64(8) + vi) % n, vj % T.int64(8) // T.int64(4), vj % T.int64(4)]


@T.prim_func(s_tir=True)
def matmul(a: T.handle, w: T.Buffer((T.int64(8), T.int64(6)), "float32"), c: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, T.int64(8)), "float32")
    C = T.match_buffer(c, (n, T.int64(6)), "float32")
    T.func_attr({"tirx.noalias": True, "global_symbol": "main"})
    for i, j, k in T.grid(n, T.int64(6), T.int64(8)):
        with T.sblock("mm"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * w[vk, vj]


@T.prim_func(s_tir=True)
def rowsum(a: T.handle, b: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, T.int64(16)), "float32")
    B = T.match_buffer(b, (n,), "float32")
    T.func_attr({"tirx.noalias": True, "global_symbol": "main"})
    for i, k in T.grid(n, T.int64(16)):
        with T.sblock("s"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi, vk]


@T.prim_func(s_tir=True)
def log_softmax(a: T.handle, b: T.handle):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    n = T.int64()
    logits = T.match_buffer(a, (T.int64(3), n), "float32")
    out = T.match_buffer(b, (T.int64(3), n), "float32")
    row_max = T.sblock_alloc_buffer((T.int64(3),))
    row_sum = T.sblock_alloc_buffer((T.int64(3),))
    for i0, k in T.grid(T.int64(3), n):
        with T.sblock("max"):
            v_i0, v_k = T.axis.remap("SR", [i0, k])
            with T.init():
                row_max[v_i0] = T.float32(-3.4028234663852886e38)
            row_max[v_i0] = T.max(row_max[v_i0], logits[v_i0, v_k])
    for i0, k in T.grid(T.int64(3), n):
        with T.sblock("sum"):
            v_i0, v_k = T.axis.remap("SR", [i0, k])
            with T.init():
                row_sum[v_i0] = T.float32(0.0)
            row_sum[v_i0] = row_sum[v_i0] + T.exp(logits[v_i0, v_k] - row_max[v_i0])
    for i0, i1 in T.grid(T.int64(3), n):
        with T.sblock("out"):
            v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
            out[v_i0, v_i1] = logits[v_i0, v_i1] - row_max[v_i0] - T.log(row_sum[v_i0])


@T.prim_func(s_tir=True)
def mean(a: T.handle, b: T.Buffer((T.int64(4),), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    n = T.int64()
    x = T.match_buffer(a, (n, T.int64(4)), "float32")
    x_red = T.sblock_alloc_buffer((T.int64(4),))
    for ax0, k0 in T.grid(T.int64(4), n):
        with T.sblock("x_red"):
            v_ax0, v_k0 = T.axis.remap("SR", [ax0, k0])
            with T.init():
                x_red[v_ax0] = T.float32(0.0)
            x_red[v_ax0] = x_red[v_ax0] + x[v_k0, v_ax0]
    for ax0 in range(T.int64(4)):
        with T.sblock("T_divide"):
            v_ax0 = T.axis.spatial(T.int64(4), ax0)
            b[v_ax0] = x_red[v_ax0] / T.Cast("float32", n)


@T.prim_func(s_tir=True)
def cumsum(a: T.handle, b: T.handle):
    """topi's generic CPU cumsum, as relax's ``cumsum`` over the last axis legalizes."""
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    n = T.int64()
    p = T.match_buffer(a, (T.int64(2), n), "float32")
    out_buf = T.match_buffer(b, (T.int64(2), n), "float32")
    with T.sblock("cumsum_generic"):
        for v in T.parallel(T.int64(2)):
            out_buf[v * n // n, v * n % n] = p[v * n // n, v * n % n]
            for v_1 in range(n - T.int64(1)):
                out_buf[(v * n + (v_1 + T.int64(1))) // n, (v * n + (v_1 + T.int64(1))) % n] = (
                    out_buf[(v * n + v_1) // n, (v * n + v_1) % n] + p[(v * n + (v_1 + T.int64(1))) // n,
                                                                        (v * n + (v_1 + T.int64(1))) % n])


KERNELS = {"reshape": reshape, "matmul": matmul, "rowsum": rowsum, "log_softmax": log_softmax}


@pytest.mark.parametrize("size", [0, 1])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_zero_trip_loops_check_ok_in_every_flavour(monkeypatch, name, size):
    monkeypatch.setitem(zoo.SYMBOLIC_SIZES, "n", size)
    for flavour in zoo.FLAVOURS:
        outcome = zoo.check_kernel(f"zero.{name}", KERNELS[name], flavour, mode="fast", check=True,
                                   reference=KERNELS[name] if flavour == "dlight-gpu" else None)
        assert outcome.outcome == "ok", (flavour, outcome.stage, outcome.reason)


def test_mean_over_an_empty_axis_is_tvms_undefined_result(monkeypatch):
    monkeypatch.setitem(zoo.SYMBOLIC_SIZES, "n", 0)
    for flavour in zoo.FLAVOURS:
        outcome = zoo.check_kernel("zero.mean", mean, flavour, mode="fast", check=True,
                                   reference=mean if flavour == "dlight-gpu" else None)
        assert outcome.outcome in ("crash", "wrong") and zoo.tvm_finding(outcome), (flavour, outcome.reason)
        if flavour != "dlight-gpu":  # dlight's GPU reduction computes a NaN the llvm build does not
            assert zoo.NEVER_WRITTEN in outcome.reason and "read of x_red[0]" in outcome.reason
            assert "writes x_red only inside loops that run no iteration" in outcome.tvm_failure
            assert "`, n = 0)" in outcome.tvm_failure
    monkeypatch.setitem(zoo.SYMBOLIC_SIZES, "n", 1)
    assert zoo.check_kernel("zero.mean", mean, "none", mode="fast", check=True).outcome == "ok"


@T.prim_func(s_tir=True)
def cumsum_rows(a: T.handle, b: T.handle):
    """topi's generic CPU cumsum along the first axis: its first row is copied before the loop."""
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    n = T.int64()
    p = T.match_buffer(a, (n, T.int64(3)), "float32")
    out_buf = T.match_buffer(b, (n, T.int64(3)), "float32")
    with T.sblock("cumsum_generic"):
        for v in T.parallel(T.int64(3)):
            out_buf[T.int64(0), v] = p[T.int64(0), v]
            for v_1 in range(n - T.int64(1)):
                out_buf[v_1 + T.int64(1), v] = out_buf[v_1, v] + p[v_1 + T.int64(1), v]


@pytest.mark.parametrize("kernel,refusal,evidence", [
    # the first store divides by the axis length
    (cumsum, "ZeroDivisionError: integer division by zero", "divides by `n`, n = 0 in `out_buf[v * n // n, v * n % n] = p["),
    # the first row is copied before the loop
    (cumsum_rows, "IndexError: out-of-bounds read of p[0, 0]",
     "writes out_buf, empty at these sizes (shape (0, 3)), in `out_buf[0, v] = p[0, v]`"),
])
def test_topi_cumsum_of_an_empty_axis_has_no_defined_native_run(monkeypatch, kernel, refusal, evidence):
    monkeypatch.setitem(zoo.SYMBOLIC_SIZES, "n", 0)
    outcome = zoo.check_kernel("zero.cumsum", kernel, "none", mode="fast", check=True)
    assert outcome.outcome == "crash" and "native run refused" in outcome.reason
    assert refusal.split(": ", 1)[1][:20] in outcome.reason  # the trap the emulation found
    assert zoo.tvm_finding(outcome) == outcome.tvm_failure
    assert evidence in outcome.tvm_failure
    args = [np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)]
    assert refused_reference_evidence(kernel, args, refusal) is None  # nothing empty, no zero divisor
    monkeypatch.setitem(zoo.SYMBOLIC_SIZES, "n", 2)
    assert zoo.check_kernel("zero.cumsum", kernel, "none", mode="fast", check=True).outcome == "ok"


def test_zero_trip_evidence_needs_every_store_in_an_empty_loop():
    alarm = "read of x_red[0], an element of a buffer allocation that was never written"
    out = np.zeros(4, np.float32)
    assert "`for k0 in range(n)`, n = 0" in zero_trip_evidence(mean, [np.zeros((0, 4), np.float32), out], alarm)
    assert zero_trip_evidence(mean, [np.zeros((2, 4), np.float32), out], alarm) is None  # the sum is written
    assert zero_trip_evidence(mean, [np.zeros((0, 4), np.float32), out], alarm.replace("x_red", "b")) is None


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_log_softmax_of_empty_rows_is_empty_as_natively(mode):
    hm = thn.build(log_softmax)
    logits = np.zeros((3, 0), np.float32)
    out = np.zeros((3, 0), np.float32)
    hm.emulate(logits, out, mode=mode, check=True)  # no row maximum is read: no alarm
    native = np.zeros((3, 0), np.float32)
    hm.run_native(logits, native)
    assert out.shape == native.shape == (3, 0)


def test_reshape_with_a_zero_modulus_over_no_rows():
    hm = thn.build(reshape)
    b = np.zeros((0, 8), np.float32)
    hm.emulate(np.zeros((0, 2, 4), np.float32), b, mode="fast")
    assert b.shape == (0, 8)


def test_index_division_by_zero_over_no_lanes_does_not_trap():
    empty = np.zeros((0, 3), np.int64)
    assert floordiv(empty, 0).shape == (0, 3) and floormod(empty, 0).shape == (0, 3)
    with pytest.raises(ZeroDivisionError):
        floordiv(np.arange(3), 0)  # with lanes it still does
