"""Warp shuffles inside a branch: ``s_tir.LowerThreadAllreduce`` lowers a reduction to
``tvm_warp_activemask`` and ``tvm_warp_shuffle*`` wherever the reduction is, also under a loop whose
bound each thread reads from its own register (TVM's paged-KV decode kernel) or an ``if`` that only
some threads take.  The emulation runs them in the threads that take the branch: ``__activemask()``
holds those threads' bits, and a thread reading one outside the branch gets CUDA's undefined value,
which the sanitizer taints (reported only if it reaches memory that is read)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import runtime
from tvm_hybrid_nb.errors import EmulationError

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})


@T.prim_func(s_tir=True)
def sum_per_trip(A: T.Buffer((4,), "float32"), N: T.Buffer((1,), "int32"), O: T.Buffer((4,), "float32")):
    T.func_attr({"tirx.is_scheduled": True})
    for tx in T.thread_binding(4, thread="threadIdx.x"):
        with T.sblock("b"):
            n = T.sblock_alloc_buffer((1,), "int32", scope="local")
            acc = T.sblock_alloc_buffer((1,), "float32", scope="local")
            t0 = T.sblock_alloc_buffer((1,), "float32", scope="local")
            x = T.sblock_alloc_buffer((1,), "float32", scope="local")
            n[0] = N[0]  # every thread the same trip count, from its own register
            acc[0] = T.float32(0)
            for it in range(n[0]):
                x[0] = A[tx] * T.Cast("float32", it + 1)
                with T.sblock("red"):
                    T.reads(x[0])
                    T.writes(t0[0])
                    T.attr(T.comm_reducer(lambda a, b: a + b, [T.float32(0)]), "reduce_scope", T.int32(0))
                    T.tvm_thread_allreduce(T.uint32(1), x[0], True, t0[0], tx, dtype="void")
                acc[0] = acc[0] + t0[0]
            O[tx] = acc[0]


@T.prim_func(s_tir=True)
def row_sums_of_some_rows(A: T.Buffer((4, 8), "float32"), O: T.Buffer((4,), "float32")):
    T.func_attr({"tirx.is_scheduled": True})
    for ty in T.thread_binding(4, thread="threadIdx.y"):
        for tx in T.thread_binding(8, thread="threadIdx.x"):
            with T.sblock("b"):
                x = T.sblock_alloc_buffer((1,), "float32", scope="local")
                t0 = T.sblock_alloc_buffer((1,), "float32", scope="local")
                if ty < 2:  # the groups of 8 threads that reduce lie inside the branch
                    x[0] = A[ty, tx]
                    with T.sblock("red"):
                        T.reads(x[0])
                        T.writes(t0[0])
                        T.attr(T.comm_reducer(lambda a, b: a + b, [T.float32(0)]), "reduce_scope", T.int32(0))
                        T.tvm_thread_allreduce(T.uint32(1), x[0], True, t0[0], tx, dtype="void")
                    O[ty] = t0[0]


@T.prim_func(s_tir=True)
def half_warp_sum(A: T.Buffer((32,), "float32"), O: T.Buffer((1,), "float32")):
    T.func_attr({"tirx.is_scheduled": True})
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        with T.sblock("b"):
            x = T.sblock_alloc_buffer((1,), "float32", scope="local")
            t0 = T.sblock_alloc_buffer((1,), "float32", scope="local")
            if tx < 16:  # a reduction over all 32 threads that only 16 reach
                x[0] = A[tx]
                with T.sblock("red"):
                    T.reads(x[0])
                    T.writes(t0[0])
                    T.attr(T.comm_reducer(lambda a, b: a + b, [T.float32(0)]), "reduce_scope", T.int32(0))
                    T.tvm_thread_allreduce(T.uint32(1), x[0], True, t0[0], tx, dtype="void")
                O[0] = t0[0]


def _stages(hm):
    stages = [s for s in hm.stages[:hm.packed_api_index] if s.changed or s.index == 0]
    assert any(s.name == "s_tir.LowerThreadAllreduce" for s in stages)
    return stages


@pytest.mark.parametrize("kernel,args,want", [
    (sum_per_trip, lambda: (np.arange(1, 5, dtype=np.float32), np.array([3], np.int32), np.zeros(4, np.float32)),
     lambda a, n, o: np.full(4, a.sum() * (1 + 2 + 3), np.float32)),
    (row_sums_of_some_rows, lambda: (np.arange(32, dtype=np.float32).reshape(4, 8), np.zeros(4, np.float32)),
     lambda a, o: np.concatenate([a[:2].sum(axis=1), np.zeros(2, np.float32)])),
])
def test_a_reduction_inside_a_branch_emulates_exactly_at_every_stage(kernel, args, want):
    hm = thn.build(kernel, target=CUDA)
    for stage in _stages(hm):
        assert stage.emulatable, (stage.label, stage.reason)
        for mode in ("exact", "fast"):
            for check in (False, True):
                out = hm.emulate(*args(), stage=stage.index, mode=mode, check=check)
                np.testing.assert_array_equal(out, want(*args()), err_msg=f"{stage.label} {mode} check={check}")


def test_a_shuffle_reading_a_thread_outside_the_branch_is_undefined_and_the_sanitizer_says_so():
    hm = thn.build(half_warp_sum, target=CUDA)
    a = np.arange(32, dtype=np.float32)
    np.testing.assert_array_equal(hm.emulate(a, np.zeros(1, np.float32), check=True), [a[:16].sum()])
    lowered = next(s.index for s in hm.stages if s.name == "s_tir.LowerThreadAllreduce")
    # Thread 0 adds thread 16's value to its own, and thread 16 is not in the branch.
    for mode in ("exact", "fast"):
        hm.emulate(a, np.zeros(1, np.float32), stage=lowered, mode=mode)  # runs; the value is CUDA's undefined one
        with pytest.raises(EmulationError, match=r"read of red_buf0\[.*never written"):
            hm.emulate(a, np.zeros(1, np.float32), stage=lowered, mode=mode, check=True)


def test_activemask_holds_the_bits_of_the_threads_in_the_branch_per_warp():
    assert runtime.warp_activemask((1, 1, 64)) == np.uint32(0xFFFFFFFF)
    lanes = np.asarray(runtime.warp_activemask((1, 1, 4))).reshape(-1)
    assert lanes.tolist() == [0xF] * 4  # a block of 4 threads: one warp with 4 lanes
    tx = np.arange(40).reshape(1, 1, -1)
    active = np.asarray(runtime.warp_activemask((1, 1, 40), ndim=3, active=(tx % 2 == 0) | (tx >= 32))).reshape(-1)
    assert active.tolist() == [0x55555555] * 32 + [0xFF] * 8


def test_a_strict_shuffle_names_the_threads():
    value = np.arange(32, dtype=np.float32).reshape(1, 1, -1)
    active = np.arange(32).reshape(1, 1, -1) < 16
    out = runtime.warp_shuffle("down", value, 8, 32, (1, 1, 32), ndim=3, active=active)
    np.testing.assert_array_equal(np.asarray(out).reshape(-1)[:8], np.arange(8, 16))
    with pytest.raises(RuntimeError, match="thread 8 of the block reads thread 16, which does not take the branch"):
        runtime.warp_shuffle("down", value, 8, 32, (1, 1, 32), ndim=3, active=active, strict=True)


def _xor_butterfly(width: int, steps: int):
    @T.prim_func
    def main(x: T.Buffer((64,), "float32"), y: T.Buffer((64,), "float32")):
        T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            v = T.alloc_buffer((1,), "float32", scope="local")
            v[0] = x[tx]
            for s in range(steps):
                v[0] = v[0] + T.tvm_warp_shuffle_xor(T.uint32(0xFFFFFFFF), v[0], T.shift_left(1, s), width, 32)
            y[tx] = v[0]
    return main


def _numpy_xor_butterfly(x, width, steps):
    v = x.copy()
    lane = np.arange(64)
    in_warp = lane % 32
    for s in range(steps):
        partner = in_warp ^ (1 << s)
        src = np.where(partner // width > in_warp // width, lane, lane - in_warp + partner)
        v = v + v[src]
    return v


@pytest.mark.parametrize("width, steps", [(32, 5), (8, 3), (8, 4)])
def test_xor_shuffle_exchanges_with_the_lane_xor_the_mask_as_cuda_does(width, steps):
    """``__shfl_xor_sync``: a butterfly over each segment of ``width`` lanes; a partner in a later
    segment gives the thread its own value (width 8, 4 steps: the last step's partner lies 8 lanes
    on for the first half of each 16)."""
    hm = thn.build(_xor_butterfly(width, steps), target="cuda")
    x = np.arange(64, dtype=np.float32)
    want = _numpy_xor_butterfly(x, width, steps)
    if steps == 5:  # every lane of a warp holds its warp's sum
        np.testing.assert_array_equal(want, np.repeat(x.reshape(2, 32).sum(axis=1), 32))
    if (width, steps) == (8, 3):  # every lane of a segment holds its segment's sum
        np.testing.assert_array_equal(want, np.repeat(x.reshape(8, 8).sum(axis=1), 8))
    for stage in [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]:
        for mode in ("exact", "fast"):
            got = hm.emulate(x, np.zeros(64, np.float32), stage=stage.index, mode=mode)
            np.testing.assert_array_equal(got, want, err_msg=f"{stage.label} {mode}")


@T.prim_func(s_tir=True)
def two_launches(A: T.Buffer((4, 24), "float32"), M: T.Buffer((4,), "float32"), B: T.Buffer((4, 24), "float32")):
    """MetaSchedule's softmax shape: a row maximum reduced across 4 threads, then a launch of 32
    threads; before SplitHostDevice both are one function, whose widest block is not the first's."""
    T.func_attr({"tirx.noalias": True})
    for i in T.thread_binding(4, thread="blockIdx.x"):
        for k_0 in range(6):
            for k_1 in T.thread_binding(4, thread="threadIdx.x"):
                with T.sblock("max"):
                    vi = T.axis.spatial(4, i)
                    vk = T.axis.reduce(24, k_0 * 4 + k_1)
                    with T.init():
                        M[vi] = T.float32(-3.4028234663852886e38)
                    M[vi] = T.max(M[vi], A[vi, vk])
    for j_0 in T.thread_binding(3, thread="blockIdx.x"):
        for j_1 in T.thread_binding(32, thread="threadIdx.x"):
            with T.sblock("scale"):
                vi = T.axis.spatial(4, (j_0 * 32 + j_1) // 24)
                vj = T.axis.spatial(24, (j_0 * 32 + j_1) % 24)
                B[vi, vj] = A[vi, vj] * T.float32(2)


def test_a_warp_shuffle_numbers_the_threads_of_its_own_launch():
    """The shuffles of the 4-thread reduction saw the function's widest block (32 threads) and failed
    to broadcast: a warp intrinsic takes the block extents of the launch it runs in."""
    hm = thn.build(two_launches, target=CUDA)
    a = np.random.default_rng(0).standard_normal((4, 24)).astype(np.float32)
    for stage in _stages(hm):
        for mode in ("exact", "fast"):
            for check in (False, True):
                m, b = np.zeros(4, np.float32), np.zeros((4, 24), np.float32)
                hm.emulate(a, m, b, stage=stage.index, mode=mode, check=check)
                np.testing.assert_array_equal(m, a.max(axis=1), err_msg=f"{stage.label} {mode} check={check}")
                np.testing.assert_array_equal(b, a * 2, err_msg=f"{stage.label} {mode} check={check}")
