"""Reduced reproducers of what the schedule fuzzer (``tvm_hybrid_nb.fuzz``) found, kept as regressions.

Each test rebuilds the reduced case, checks it the way the fuzzer does (``check_case``) and checks
the emulation against an independent truth (numpy, or the native build of the unscheduled compute).
"""
from __future__ import annotations

import numpy as np
import pytest

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError, InsufficientMemoryError
from tvm_hybrid_nb.fuzz import FuzzCase, check_case, make_compute, schedule_for

# Emulator bug: StorageRewrite turns the rfactor buffer into a buffer of float32x3 vectors; the
# hybrid script allocated it as np.zeros(..., "float32x3") (TypeError), and fast mode indexed it per lane.
VECTOR_BUFFER = FuzzCase("reduction", 1103, [("reorder", "C", [0, 2, 1]), ("vectorize", "C", 2),
                                            ("rfactor", "C", 1, 0)])


def test_buffer_of_vectors_after_storage_rewrite_emulates_in_both_modes():
    result = check_case(VECTOR_BUFFER, stages="all")
    assert result.ok and result.category == "", str(result)
    compute = make_compute(VECTOR_BUFFER.kind, VECTOR_BUFFER.seed)
    sch, applied = schedule_for(compute, VECTOR_BUFFER.steps)
    assert applied == VECTOR_BUFFER.steps
    hm = thn.build(sch)
    stage = hm.stage("tirx.StorageRewrite")
    assert "float32x3" in stage.script  # the construct this regression is about is really there
    n = 5
    a, b, c = hm.random_inputs(seed=3, sizes={"n": n})
    truth = np.min(a[:, :, None] * b[None, :, :], axis=1)  # float32 products, exact min
    for mode in ("exact", "fast"):
        for check in (False, True):  # the sanitizers read rows of vector lanes too
            out = hm.emulate(a, b, np.zeros_like(c), stage=stage.index, mode=mode, check=check)
            np.testing.assert_array_equal(out, truth, err_msg=f"{mode} check={check}")


# TVM 0.27 miscompilations the fuzzer found; the emulator exposes them instead of agreeing with them.
TRANSFORM_LAYOUT_OOB = FuzzCase("pipeline", 5, [("transform_layout", "T", "write", 0, "split:2")])
PLAN_ALLOCATION = FuzzCase("elementwise", 30, [("cache_read", "C", 0, "local"), ("reverse_compute_at", "A_local", "C", 1),
                                               ("split", "C", 0, [4, None]), ("reverse_compute_at", "C", "A_local", 3)])
HUGE_COMPACTED_BUFFER = FuzzCase("pipeline", 1085, [("reverse_compute_at", "T", "C", 1)])
USE_BEFORE_COMPUTE = FuzzCase("pipeline", 7081, [("cache_write", "T", 0, "global"), ("reverse_compute_at", "T", "C", 1)])


def _built(case):
    compute = make_compute(case.kind, case.seed)
    sch, applied = schedule_for(compute, case.steps)
    assert applied == case.steps
    return compute, thn.build(sch), thn.build(list(compute.tensors))


def test_transform_layout_of_a_reversed_read_is_refused_as_out_of_bounds():
    # T[i, m - 1 - j] re-laid out by j -> (j // 2, j % 2) becomes T[i, j // -2 + 2, j % -2 * -1]: for
    # j = m - 1 that is row -1.  The emulation refuses the read; the native kernel reads outside T.
    result = check_case(TRANSFORM_LAYOUT_OOB)
    assert result.category == "tvm_schedule_bug", str(result)
    compute, hm, plain = _built(TRANSFORM_LAYOUT_OOB)
    a, c = hm.random_inputs(seed=0, sizes=compute.sizes)
    with pytest.raises(EmulationError, match=r"out-of-bounds read of T\[0, -1, 1\]"):
        hm.emulate(a, c.copy())
    truth = plain.emulate(a, c.copy()).copy()
    np.testing.assert_array_equal(truth, plain.run_native(a, c.copy()))
    # The native kernel would read outside T: run_native refuses these inputs instead of running it.
    with pytest.raises(EmulationError, match=r"native run refused: .*out-of-bounds read of T\[0, -1, 1\]"):
        hm.run_native(a, c.copy())


def test_plan_buffer_allocation_miscompile_is_located_by_the_emulation():
    # reverse_compute_at under a predicated loop: PlanAndUpdateBufferAllocationLocation moves A_local's
    # allocation into the loop, where the predicated-off iteration reads it before writing it.
    result = check_case(PLAN_ALLOCATION)
    assert result.category == "tvm_pass_bug", str(result)
    assert "PlanAndUpdateBufferAllocationLocation" in result.detail
    compute, hm, plain = _built(PLAN_ALLOCATION)
    a, b, c = hm.random_inputs(seed=1)
    truth = plain.run_native(a, b, c.copy()).copy()
    np.testing.assert_allclose(hm.emulate(a, b, c.copy()), truth, rtol=1e-5, atol=1e-6)  # the schedule is right
    assert not np.allclose(hm.run_native(a, b, c.copy()), truth, equal_nan=True)  # the native kernel is not
    culprit = hm.stage("s_tir.PlanAndUpdateBufferAllocationLocation")
    before = hm.emulate(a, b, c.copy(), stage=culprit.index - 1).copy()
    np.testing.assert_allclose(before, truth, rtol=1e-5, atol=1e-6)
    assert not np.allclose(hm.emulate(a, b, c.copy(), stage=culprit.index), truth, equal_nan=True)


def test_compacted_buffer_of_int32_max_rows_is_refused_before_allocating():
    # CompactBufferAllocation bounds a symbolic extent by 2**31 - 1 rows: 56 GiB of float32.
    result = check_case(HUGE_COMPACTED_BUFFER)
    assert result.ok and result.category == "unsupported", str(result)
    assert "nothing was allocated" in result.detail
    compute, hm, _ = _built(HUGE_COMPACTED_BUFFER)
    args = hm.random_inputs(seed=0, sizes=compute.sizes)
    with pytest.raises(InsufficientMemoryError, match=r"buffer of shape \(2147483647, 7\)"):
        hm.emulate(*args, stage="s_tir.CompactBufferAllocation")
    assert hm.compare(*args).ok  # stage 0 is fine, and so is the module afterwards


def test_out_of_bounds_schedule_is_refused_and_never_run_natively():
    # compute_at + cache_write of T read reversed: T_global_local[0, -1] at stage 0; its native kernel
    # segfaults the process, so the fuzzer must classify it from the emulation alone.
    case = FuzzCase("pipeline", 1146, [("compute_at", "T", "C", 1), ("cache_write", "T", 0, "global"),
                                       ("parallel", "T_global", 0), ("cache_read", "C", 0, "global"),
                                       ("split", "T", 0, [None, 2]), ("split", "C", 2, [None, 3]),
                                       ("cache_write", "T", 0, "local")])
    result = check_case(case)  # would kill this process if it ran the native kernel
    assert result.category == "tvm_schedule_bug", str(result)
    assert "out-of-bounds read of T_global_local[0, -1]" in result.detail and "not run natively" in result.detail


def test_schedule_that_reads_a_cache_before_filling_it_is_found_by_the_sanitizer():
    # cache_write of T, then reverse_compute_at of T (now the producer of T_global) under C's loop: TVM
    # accepts it, and the copy T_global -> T runs before any T_global element is computed.
    result = check_case(USE_BEFORE_COMPUTE)
    assert result.category == "tvm_schedule_bug", str(result)
    assert "read of T_global[0, 0], an element of a buffer allocation that was never written" in result.detail
    compute, hm, plain = _built(USE_BEFORE_COMPUTE)
    a, c = hm.random_inputs(seed=0, sizes=compute.sizes)
    truth = plain.run_native(a, c.copy()).copy()
    np.testing.assert_allclose(truth, (2.0 / np.sqrt(np.abs(a.astype(np.float64)))).sum(axis=1), rtol=1e-5)
    assert not np.allclose(hm.emulate(a, c.copy()), truth)  # the scheduled program is wrong, not the emulator
    with pytest.raises(EmulationError, match="never written"):
        hm.emulate(a, c.copy(), check=True)


def test_a_compute_tvm_refuses_counts_as_refused_instead_of_ending_the_run():
    # Seed 9015 draws T = A / (A - A): TVM folds A - A to 0 and create_prim_func raises "Divide by
    # zero", which used to escape random_case and end the whole fuzzing run.
    from tvm_hybrid_nb.fuzz import run_fuzz

    report = run_fuzz(2, seed=9014, timeout=0)
    assert report.ok and report.cases == 2 and report.tvm_rejected >= 1, report.summary()


def test_rfactor_under_a_predicate_reading_uninitialised_partials_is_tvms_bug():
    # rfactor of a split reduction whose tail is predicated off: the partial sums C_rf[1] and C_rf[2]
    # are initialised inside the predicated block, never run, and then summed.  transform_layout
    # changed the signature, so there is no unscheduled build to compare with: the sanitizer decides.
    case = FuzzCase("window", 153, [("split", "C", 1, [3, None]), ("split", "C", 2, [None, 3, 2]),
                                    ("transform_layout", "C", "write", 0, "split:4"), ("rfactor", "C", 3, 0)])
    result = check_case(case)
    assert result.category == "tvm_schedule_bug", str(result)
    assert "read of C_rf[1, 0, 0], an element of a buffer allocation that was never written" in result.detail


def test_bitwise_not_of_an_unsigned_constant_wraps():
    # Seed 336: C[i] = ~T.uint8(4) became the Python int ~4 == -5, which numpy refuses to store in
    # a uint8 array; the hardware gives 251.
    assert check_case(FuzzCase("elementwise", 336, [])).ok
    from tvm.script import tirx as T

    @T.prim_func
    def inverted(A: T.Buffer((4,), "uint8"), B: T.Buffer((4,), "uint8"), C: T.Buffer((4,), "int8")):
        for i in range(4):
            B[i] = ~T.uint8(4) + ~A[i]
            C[i] = ~T.int8(-128)

    hm = thn.build(inverted)
    a = np.array([0, 1, 254, 255], np.uint8)
    native_b, native_c = hm.run_native(a, np.zeros(4, np.uint8), np.zeros(4, np.int8))
    np.testing.assert_array_equal(native_b, (np.uint8(251) + ~a).astype(np.uint8))
    for mode in ("exact", "fast"):
        b, c = hm.emulate(a, np.zeros(4, np.uint8), np.zeros(4, np.int8), mode=mode)
        np.testing.assert_array_equal(b, native_b)
        np.testing.assert_array_equal(c, native_c)


@pytest.mark.parametrize("case", [
    # The sanitizers (check=True, what the notebook button runs) on a predicated tail where every lane
    # of a read is masked off: checking zero elements for having been written used to raise.
    FuzzCase("pipeline", 405, [("split", "C", 0, [4, None])]),
    # After StorageRewrite a buffer allocated per fast-mode lane is re-declared (DeclBuffer): fast
    # mode refused the stage instead of running that loop serially.
    FuzzCase("cast", 432, [("parallel", "C", 0), ("compute_at", "B", "C", 0), ("cache_read", "C", 0, "global")]),
], ids=["sanitizer-all-lanes-masked", "per-lane-buffer-view"])
def test_found_by_running_the_sanitizers_in_the_fuzzer(case):
    result = check_case(case)
    assert result.ok and result.category == "", str(result)
