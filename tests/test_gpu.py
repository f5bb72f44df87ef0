"""GPU (cuda target) emulation and the sanitizers, compared with numpy: no GPU needed."""
from __future__ import annotations

import re

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError
from tvm_hybrid_nb.examples import GPU_EXAMPLES, gpu_row_sum, gpu_tiled_matmul

_BUILT: dict = {}


def built(name):
    if name not in _BUILT:
        example = GPU_EXAMPLES[name]()
        _BUILT[name] = (example, thn.build(example.obj, target="cuda"))
    return _BUILT[name]


@pytest.mark.parametrize("name", list(GPU_EXAMPLES))
def test_correct_gpu_kernels_match_numpy_at_every_stage_with_sanitizers_on(name):
    example, hm = built(name)
    args = example.inputs(hm, seed=3)
    for stage in hm.stages[:hm.packed_api_index]:
        assert stage.emulatable, f"{stage.label}: {stage.reason}"
        if stage.changed or stage.index == 0:
            for mode in ("exact", "fast"):
                result = hm.compare(*args, stage=stage.index, reference=example.reference, mode=mode,
                                    check=True)
                assert result.ok, f"{stage.label} {mode}: {result}"
    assert hm.packed_api_index >= 45
    # The host function launching the device kernel (after SplitHostDevice) runs too.
    launch = hm.stage("tirx.ConvertSSA")
    assert "def main_kernel(" in launch.source and "main_kernel(" in launch.source.split("def main(")[1]


def test_threads_run_in_lockstep_so_shared_memory_tiles_are_complete():
    # Thread by thread, a thread would read shared tiles that later threads have not filled yet.
    example, hm = built("gpu_tiled_matmul")
    lifted = hm.stage("s_tir.LiftThreadBinding")
    src = lifted.source
    assert "thread_lanes(threadIdx_x, 'threadIdx.x')" in src
    assert "A_shared" in src
    args = example.inputs(hm, seed=4)
    out = hm.emulate(*args, stage=lifted.index).copy()
    np.testing.assert_allclose(out, example.reference(args[0], args[1]), rtol=1e-5, atol=1e-5)


def test_a_block_reducing_across_threads_takes_their_contributions_in_thread_order():
    example, hm = built("gpu_row_sum")
    src = hm.get_source(0)
    assert "for k_1_serial in range(32):" in src  # before LowerCrossThreadReduction lowers it
    args = example.inputs(hm, seed=8)
    out = hm.emulate(*args).copy()
    np.testing.assert_allclose(out, args[0].astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_barriers_and_warp_shuffles_are_in_the_lowered_reduction():
    example, hm = built("gpu_row_sum")
    lowered = hm.stage("s_tir.LowerThreadAllreduce")
    assert "warp_shuffle('down'" in lowered.source
    args = example.inputs(hm, seed=5)
    result = hm.compare(*args, stage=lowered.index, reference=example.reference, check=True)
    assert result.ok, str(result)
    allreduce = hm.stage("s_tir.LowerCrossThreadReduction")
    assert "thread_allreduce(lambda" in allreduce.source


@T.prim_func
def _racy_parallel(A: T.Buffer((16,), "float32"), B: T.Buffer((1,), "float32")):
    for i in T.parallel(16):
        B[0] = B[0] + A[i]


@T.prim_func
def _in_place_exchange(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            S[tx] = A[bx * 32 + tx]
            # Thread tx reads the element that thread 31 - tx overwrites in the same statement: no
            # barrier can go between them, so ThreadSync cannot repair it (it adds one only above).
            S[tx] = S[31 - tx]
            B[bx * 32 + tx] = S[tx]


@T.prim_func
def _with_barrier(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            S[tx] = A[bx * 32 + tx]
            T.evaluate(T.tvm_storage_sync("shared"))
            B[bx * 32 + tx] = S[31 - tx]


@T.prim_func
def _divergent_barrier(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            S[tx] = A[bx * 32 + tx]
            if tx < 16:
                T.evaluate(T.tvm_storage_sync("shared"))
            B[bx * 32 + tx] = S[31 - tx]


@T.prim_func
def _off_by_one(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            B[bx * 32 + tx] = A[bx * 32 + tx + 1]


@T.prim_func
def _uninitialised(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    tmp = T.alloc_buffer((16,), "float32")
    for i in range(15):
        tmp[i] = A[i]
    for i in range(16):
        B[i] = tmp[i]


def _inputs(hm):
    return hm.random_inputs(seed=6)


def test_off_by_one_index_is_an_out_of_bounds_read_with_its_line():
    hm = thn.build(_off_by_one, target="cuda")
    with pytest.raises(EmulationError, match=r"out-of-bounds read of A\[64\] \(1 of 32 lanes\)") as info:
        hm.emulate(*_inputs(hm))
    assert "stage 0 input" in str(info.value) and "B[bx * 32 + tx] = load(A, (bx * 32 + tx + 1,)" in str(info.value)


def test_exchange_within_one_statement_is_a_race_between_threads_at_every_stage():
    hm = thn.build(_in_place_exchange, target="cuda")
    args = _inputs(hm)
    hm.emulate(*[a.copy() for a in args])  # without the sanitizer the lockstep run hides the bug
    with pytest.raises(EmulationError, match=r"data race on S\[\d+\]: lanes \(threadIdx.x=\d+\) and "
                                             r"\(threadIdx.x=\d+\)"):
        hm.emulate(*[a.copy() for a in args], check=True)
    sync = next(s.index for s in hm.stages if s.name == "s_tir.ThreadSync")
    for stage in (sync - 1, sync, hm.packed_api_index - 1):
        with pytest.raises(EmulationError, match=r"data race on S\["):
            hm.emulate(*[a.copy() for a in args], check=True, mode="fast", stage=stage)


def test_the_same_kernel_with_its_barrier_passes_and_matches_numpy():
    hm = thn.build(_with_barrier, target="cuda")
    a = np.arange(64, dtype=np.float32)
    out = hm.emulate(a, np.zeros(64, np.float32), check=True)
    np.testing.assert_array_equal(out, np.concatenate([a[:32][::-1], a[32:][::-1]]))


def test_barrier_inside_a_thread_dependent_branch_is_refused():
    hm = thn.build(_divergent_barrier, target="cuda")
    with pytest.raises(EmulationError, match=r"barrier \(shared\) not reached by all threads of the block: "
                                             r"16 of 32 lanes reach it"):
        hm.emulate(*_inputs(hm))


def test_racy_parallel_loop_is_caught_by_the_sanitizer():
    hm = thn.build(_racy_parallel, target="llvm")
    args = _inputs(hm)
    for mode in ("exact", "fast"):
        with pytest.raises(EmulationError, match=r"data race on B\[0\]: lanes \(parallel i=\d+\) and \(parallel i=\d+\)"):
            hm.emulate(*[a.copy() for a in args], check=True, mode=mode)


def test_read_of_never_written_allocation_element_is_caught():
    hm = thn.build(_uninitialised, target="llvm")
    args = _inputs(hm)
    hm.emulate(*[a.copy() for a in args])  # unchecked: reads the zero the emulator put there
    for mode in ("exact", "fast"):
        with pytest.raises(EmulationError, match=r"read of tmp\[15\], an element of a buffer allocation that was "
                                                 r"never written"):
            hm.emulate(*[a.copy() for a in args], check=True, mode=mode)


def test_fast_sanitizer_names_the_first_unwritten_element_of_a_2d_allocation():
    @T.prim_func
    def partly_written(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8, 32), "float32")):
        tmp = T.alloc_buffer((8, 32), "float32")
        for i, j in T.grid(8, 32):
            if i * 32 + j < 7 * 32 + 10:
                tmp[i, j] = A[i, j]
        for i, j in T.grid(8, 32):
            B[i, j] = tmp[i, j] * T.float32(2)

    hm = thn.build(partly_written, target="llvm")
    assert "read_written(" in hm.stage(0).kernel("fast", check=True).source  # the view-based check ran
    args = _inputs(hm)
    for mode in ("exact", "fast"):
        with pytest.raises(EmulationError, match=r"read of tmp\[7, 10\], an element of a buffer allocation"):
            hm.emulate(*[a.copy() for a in args], check=True, mode=mode)


def test_masked_out_select_lanes_are_not_out_of_bounds_errors_with_the_sanitizer():
    @T.prim_func
    def guarded(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        B[T.Ramp(0, 1, 8)] = T.Select(T.Ramp(0, 1, 8) < T.Broadcast(6, 8), A[T.Ramp(2, 1, 8)],
                                      T.Broadcast(T.float32(0), 8))

    hm = thn.build(guarded)
    a = np.arange(8, dtype=np.float32)
    out = hm.emulate(a, np.zeros(8, np.float32), check=True)
    np.testing.assert_array_equal(out, [2, 3, 4, 5, 6, 7, 0, 0])


def test_correct_cpu_kernels_pass_the_sanitizer():
    from tvm_hybrid_nb.examples import conv2d_padded, matmul_cache_compute_at, matmul_parallel_vectorize, softmax

    for example in (matmul_parallel_vectorize(16), matmul_cache_compute_at(32), conv2d_padded(c=2, k=2), softmax()):
        name = example.name
        hm = thn.build(example.obj)
        args = example.inputs(hm, seed=7)
        for stage in (0, "tirx.FlattenBuffer", "tirx.CommonSubexprElim"):
            for mode in ("exact", "fast"):
                result = hm.compare(*args, stage=stage, reference=example.reference, check=True, mode=mode)
                assert result.ok, f"{name} {stage} {mode}: {result}"


def test_gpu_examples_are_distinct_from_cpu_examples():
    assert gpu_tiled_matmul().name == "gpu_tiled_matmul" and gpu_row_sum().name == "gpu_row_sum"


@T.prim_func
def _warp_tail_sum(A: T.Buffer((64,), "float32"), B: T.Buffer((2,), "float32")):
    # LowerThreadAllreduce's shared-memory tail (bfloat16 has no warp shuffle): the last steps run in
    # the first 16 lanes of warp 0, with tvm_storage_sync("warp") between them.
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            S[tx] = A[bx * 32 + tx]
            T.evaluate(T.tvm_storage_sync("shared"))
            if tx < 16:
                w: T.float32 = S[tx] + S[tx + 16]
                T.evaluate(T.tvm_storage_sync("warp"))
                S[tx] = w
                T.evaluate(T.tvm_storage_sync("warp"))
            T.evaluate(T.tvm_storage_sync("shared"))
            if tx == 0:
                B[bx] = S[0] + S[1] + S[2] + S[3] + S[4] + S[5] + S[6] + S[7] + S[8] + S[9] + S[10] + S[11] \
                    + S[12] + S[13] + S[14] + S[15]


def test_a_warp_sync_in_a_branch_of_some_lanes_is_not_a_block_barrier():
    # The CUDA code generator emits nothing for tvm_storage_sync("warp"): no thread has to reach it.
    # s_tir.ThreadSync refuses this hand-written kernel (its own shared writes in a branch): stage 0 runs.
    hm = thn.build(_warp_tail_sum, target="cuda", on_failure="keep")
    a = np.arange(64, dtype=np.float32) / 8
    want = a.reshape(2, 32)[:, :16] + a.reshape(2, 32)[:, 16:]
    want = want.astype(np.float32).sum(axis=1, dtype=np.float32)
    for check in (False, True):
        for mode in ("exact", "fast"):
            out = hm.emulate(a, np.zeros(2, np.float32), check=check, mode=mode)
            np.testing.assert_array_equal(out, want)


@T.prim_func
def _bf16_axpy(A: T.Buffer((64,), "bfloat16"), X: T.Buffer((64,), "float32"), C: T.Buffer((64,), "bfloat16")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            C[bx * 32 + tx] = A[bx * 32 + tx] * T.bfloat16(3) + T.Cast("bfloat16", X[bx * 32 + tx])


def test_bfloat16_on_a_gpu_with_bf16_arithmetic_rounds_every_operation():
    # sm_80 computes nv_bfloat16 as bfloat16 (BF16ComputeLegalize leaves it): each product, sum and
    # cast rounds to bfloat16, unlike llvm's float32 (tests/test_guarantees_semantics.py).
    import ml_dtypes
    import tvm

    hm = thn.build(_bf16_axpy, target=tvm.target.Target({"kind": "cuda", "arch": "sm_80"}))
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, 64).astype(ml_dtypes.bfloat16)
    x = rng.uniform(-1, 1, 64).astype(np.float32)
    bf = ml_dtypes.bfloat16
    want = ((a.astype(np.float32) * 3).astype(bf).astype(np.float32) + x.astype(bf).astype(np.float32)).astype(bf)
    in_float32 = (a.astype(np.float32) * 3 + x).astype(bf)
    assert (want != in_float32).any()
    for stage in (0, hm.stage("tirx.ConvertSSA").index):
        for mode in ("exact", "fast"):
            c = np.zeros(64, bf)
            hm.emulate(a, x, c, stage=stage, mode=mode)
            np.testing.assert_array_equal(c.view(np.uint16), want.view(np.uint16))


@T.prim_func
def _scalar_by_one_thread(A: T.Buffer((), "float32"), B: T.Buffer((), "float32")):
    # dlight's Fallback rule on a scalar result (a loss, a full sum): 1024 threads, only thread 0 writes.
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(1024, thread="threadIdx.x"):
            if bx * 1024 + tx < 1:
                B[()] = A[()] * T.float32(-0.25)


@pytest.mark.parametrize("check", [False, True])
def test_a_zero_dimensional_buffer_written_by_the_one_thread_a_guard_keeps(check):
    hm = thn.build(_scalar_by_one_thread, target="cuda")
    for stage in hm.stages[:hm.packed_api_index]:
        for mode in ("fast", "exact"):
            b = np.zeros((), "float32")
            hm.emulate(np.array(3.0, "float32"), b, stage=stage.index, mode=mode, check=check)
            assert b == np.float32(-0.75), (stage.label, mode)


@T.prim_func
def _block_sort(A: T.Buffer((20,), "float32")):
    # topi's GPU sort, first phase: each block sorts its chunk of min(8, 20 - 8 bx) values in shared
    # memory by odd-even transposition, one trip per value, so the blocks loop differently often.
    with T.attr(0, "hand_threaded", 0):  # its barriers are written by hand, as topi does
        for bx in T.thread_binding(3, thread="blockIdx.x"):
            S = T.alloc_buffer((8,), "float32", scope="shared")
            for tx in T.thread_binding(4, thread="threadIdx.x"):
                t = T.alloc_buffer((3,), "float32", scope="local")
                for j in range(2):
                    if bx * 8 + tx * 2 + j < 20:
                        S[tx * 2 + j] = A[bx * 8 + tx * 2 + j]
                T.evaluate(T.tvm_storage_sync("shared"))
                for k in range(T.min(8, 20 - bx * 8)):
                    if tx * 2 + k % 2 < T.min(8, 20 - bx * 8) - 1:
                        t[1] = S[tx * 2 + k % 2]  # compared in registers, as topi does
                        t[2] = S[tx * 2 + k % 2 + 1]
                        if t[2] < t[1]:
                            t[0] = S[tx * 2 + k % 2]
                            S[tx * 2 + k % 2] = S[tx * 2 + k % 2 + 1]
                            S[tx * 2 + k % 2 + 1] = t[0]
                    T.evaluate(T.tvm_storage_sync("shared"))
                for j in range(2):
                    if bx * 8 + tx * 2 + j < 20:
                        A[bx * 8 + tx * 2 + j] = S[tx * 2 + j]


@pytest.mark.parametrize("check", [False, True])
def test_blocks_whose_loops_run_different_trip_counts_still_run_as_lanes(check):
    """Each block loops its own trip count (``range(min(8, 20 - 8 bx))``): fast mode runs the blocks as
    lanes, each looping while it has trips left, and the barrier inside is each block's own (the
    last block has left the loop while the others still sync).  It ran the blocks one by one, so
    topi's top-k over 2,000 words took 52 s."""
    hm = thn.build(_block_sort, target="cuda")
    assert re.search(r"\n  bx: (lanes|parallel chunks) \(blocks independent", hm.explain(0)), hm.explain(0)
    a = np.random.default_rng(3).standard_normal(20).astype("float32")
    expected = np.concatenate([np.sort(a[:8]), np.sort(a[8:16]), np.sort(a[16:])])
    for stage in hm.stages[:hm.packed_api_index]:
        for mode in ("fast", "exact"):
            got = a.copy()
            hm.emulate(got, stage=stage.index, mode=mode, check=check)
            np.testing.assert_array_equal(got, expected, err_msg=f"{stage.label} {mode}")


@T.prim_func
def _barrier_in_a_loop_of_thread_dependent_trips(A: T.Buffer((8,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        S = T.alloc_buffer((4,), "float32", scope="shared")
        for tx in T.thread_binding(4, thread="threadIdx.x"):
            S[tx] = A[bx * 4 + tx]
            for k in range(tx):  # thread tx syncs tx times: a barrier that not all threads reach
                T.evaluate(T.tvm_storage_sync("shared"))
                S[tx] = S[tx] + T.float32(1)
            A[bx * 4 + tx] = S[tx]


def test_a_barrier_that_some_threads_of_a_block_skip_is_refused_with_blocks_as_lanes():
    hm = thn.build(_barrier_in_a_loop_of_thread_dependent_trips, target="cuda")
    assert re.search(r"\n  bx: (lanes|parallel chunks) \(blocks independent", hm.explain(0)), hm.explain(0)
    with pytest.raises(EmulationError, match=r"barrier \(shared\) not reached by all threads of the block: "
                                             r"3 of 4 lanes reach it"):
        hm.emulate(np.zeros(8, "float32"))


@T.prim_func(s_tir=True)
def _rows_over_threads(A: T.Buffer((4, 32), "float32"), B: T.Buffer((4,), "float32")):
    for ty in T.thread_binding(4, thread="threadIdx.y"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.sblock("B"):
                vi, vk = T.axis.remap("SR", [ty, tx])
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi, vk]


def test_a_warp_broadcast_from_a_per_row_source_lane_matches_numpy_at_every_stage():
    # LowerThreadAllreduce broadcasts each row's total with tvm_warp_shuffle(..., threadIdx.y * 32, 32, 32)
    # when a block reduces over threadIdx.x in rows (dlight on a squeeze-excite 1x1 conv); it was refused.
    hm = thn.build(_rows_over_threads, target="cuda")
    lowered = hm.stage("s_tir.LowerThreadAllreduce")
    assert "warp_shuffle('idx'" in lowered.source
    a = np.random.default_rng(0).uniform(-1, 1, (4, 32)).astype("float32")
    for stage in hm.stages[:hm.packed_api_index]:
        if not (stage.changed or stage.index == 0):
            continue
        assert stage.emulatable, f"{stage.label}: {stage.reason}"
        for mode in ("exact", "fast"):
            b = np.zeros(4, "float32")
            hm.emulate(a.copy(), b, stage=stage.index, mode=mode, check=True)
            np.testing.assert_allclose(b, a.astype(np.float64).sum(axis=1), rtol=1e-5,
                                       err_msg=f"{stage.label} {mode}")


def test_runtime_shuffle_takes_each_threads_own_source_lane():
    from tvm_hybrid_nb.runtime._gpu import warp_shuffle

    # 2 warps of 32 (threadIdx.x = 64); each thread reads lane (pos + 1) % 32 of its own warp ("idx"),
    # or pos + d with d = lane % 3 ("down", staying put past the segment's end).
    value = np.arange(64, dtype="float32").reshape(1, 1, 64)
    lane = np.arange(64).reshape(1, 1, 64)
    got = warp_shuffle("idx", value, (lane % 32 + 1).astype("int32"), 32, (1, 1, 64), ndim=3)
    want = (lane - lane % 32 + (lane % 32 + 1) % 32).astype("float32")
    np.testing.assert_array_equal(got, want)
    d = (lane % 3).astype("int32")
    got = warp_shuffle("down", value, d, 32, (1, 1, 64), ndim=3)
    want = np.where(lane % 32 + d < 32, lane + d, lane).astype("float32")
    np.testing.assert_array_equal(got, want)
    # a scalar offset behaves as before
    np.testing.assert_array_equal(warp_shuffle("idx", value, 5, 32, (1, 1, 64), ndim=3),
                                  (lane - lane % 32 + 5).astype("float32"))


def test_a_cross_thread_reduction_shares_only_the_elements_it_stores():
    # dlight's GPU reduction of a depthwise conv1d over 2,000 samples: before CompactBufferAllocation
    # each thread's accumulator keeps the whole output, and copying all of it to every thread after
    # each block's reduction (1,000 blocks) took 23 s of a 4 s stage.  Exact mode runs the blocks
    # serially: each store is now copied to the threads it is shared with, and nothing else is.
    import tvm
    from tvm import te
    from tvm.s_tir import dlight as dl

    x = te.placeholder((8, 300), "float32", name="x")
    k = te.reduce_axis((0, 300), name="k")
    y = te.compute((8,), lambda i: te.sum(x[i, k] * x[i, k], axis=k), name="y")
    z = te.compute((8,), lambda i: y[i] * 2 + 1, name="z")  # an epilogue: the sum goes to a local buffer
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    with target:
        mod = dl.ApplyDefaultSchedule(dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback())(
            tvm.IRModule({"main": te.create_prim_func([x, z])}))
    hm = thn.build(mod, target=target)
    a = np.random.default_rng(0).uniform(-1, 1, (8, 300)).astype("float32")
    want = (a.astype(np.float64) ** 2).sum(axis=1) * 2 + 1
    shared = 0
    for stage in hm.stages[:hm.packed_api_index]:
        if not (stage.changed or stage.index == 0):
            continue
        out = np.zeros(8, "float32")
        hm.emulate(a, out, stage=stage.index, mode="exact")
        np.testing.assert_allclose(out, want, rtol=1e-5, err_msg=stage.label)
        source = stage.source
        shared += len(re.findall(r"\[[^\]]*:, [^\]]*\] = \w+\[[^\]]*0:1", source))
        assert not re.search(r"\w+\[:, :, :, :\] = \w+\[", source), stage.label  # no whole-buffer copy
    assert shared > 0


@T.prim_func(s_tir=True)
def _tile_overwritten_next_iteration(A: T.Buffer((3, 4), "float32"), O: T.Buffer((4,), "float32")):
    T.func_attr({"tirx.is_scheduled": True})
    for tx in T.thread_binding(4, thread="threadIdx.x"):
        with T.sblock("b"):
            sm = T.sblock_alloc_buffer((4,), "float32", scope="shared")
            acc = T.sblock_alloc_buffer((1,), "float32", scope="local")
            acc[0] = T.float32(0)
            for it in range(3):
                sm[tx] = A[it, tx]  # overwrites what another thread read in the previous iteration
                T.tvm_storage_sync("shared")
                acc[0] = acc[0] + sm[(tx + 1) % 4]
            O[tx] = acc[0]


def test_a_kernel_with_its_own_barriers_gets_the_implied_ones_before_thread_sync():
    """TVM's MLA prefill pattern: the barrier at the loop's top comes from ThreadSync (no race at any
    stage, not just after that pass)."""
    hm = thn.build(_tile_overwritten_next_iteration, target="cuda")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    stages = [s for s in hm.stages[:hm.packed_api_index] if s.changed or s.index == 0]
    assert any(s.name == "s_tir.ThreadSync" for s in stages)
    for stage in stages:
        for mode in ("exact", "fast"):
            out = hm.emulate(a, np.zeros(4, np.float32), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, np.roll(a, -1, axis=1).sum(axis=0), err_msg=stage.label)
