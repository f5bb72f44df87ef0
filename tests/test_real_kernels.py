"""Regression tests for the GPU fidelity classes of issue 12 (kernels as TVM's dlight schedules emit
them), each a minimal TVMScript kernel checked at every changed stage before MakePackedAPI against
numpy or the native llvm build."""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

import tvm_hybrid_nb as thn


def _emulated_stages(hm):
    for stage in hm.stages:
        if hm.packed_api_index is not None and stage.index >= hm.packed_api_index:
            break
        if stage.changed:
            yield stage


def _check_every_stage(hm, inputs, expected, modes=("exact", "fast"), check=True, rtol=0.0, until=None):
    """Emulate every changed stage (before the pass ``until``) in every mode: each output must equal
    ``expected`` (bit for bit unless ``rtol``: a stage may reduce in another order), and fast mode
    must equal exact mode."""
    checked = 0
    for stage in _emulated_stages(hm):
        if stage.name == until:
            break
        assert stage.emulatable, f"{stage.label}: {stage.reason}"
        results = []
        for mode in modes:
            args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
            hm.emulate(*args, stage=stage.index, mode=mode, check=check)
            got = [a for a, p in zip(args, hm.params) if p.is_output]
            for g, want in zip(got, expected):
                if rtol:
                    np.testing.assert_allclose(g, want, rtol=rtol, err_msg=f"stage {stage.label}, {mode} mode")
                else:
                    np.testing.assert_array_equal(g, want, err_msg=f"stage {stage.label}, {mode} mode")
            results.append(got)
        for other in results[1:]:
            for g, first in zip(other, results[0]):
                np.testing.assert_array_equal(g, first, err_msg=f"stage {stage.label}: fast differs from exact")
        checked += 1
    assert checked >= 3
    return checked


# ---------------------------------------------------------------- A: local memory is one copy per thread
@T.prim_func(s_tir=True)
def _rfactor_local(A: T.Buffer((2, 8), "float32"), B: T.Buffer((2,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        with T.sblock("outer"):
            vb = T.axis.spatial(2, bx)
            rf = T.sblock_alloc_buffer((8,), scope="local")
            for tx in T.thread_binding(8, thread="threadIdx.x"):
                with T.sblock("copy"):
                    v = T.axis.spatial(8, tx)
                    rf[v] = A[vb, v]
            for tx in T.thread_binding(8, thread="threadIdx.x"):
                with T.sblock("sum"):
                    v = T.axis.reduce(8, tx)
                    with T.init():
                        B[vb] = T.float32(0)
                    B[vb] = B[vb] + rf[v]


def test_local_buffer_is_per_thread_across_loop_nests():
    """Class A: the reduction block reads each thread's own copy of ``rf`` written in another loop nest
    (stage 0 used thread 0's copy only: 0 instead of 28)."""
    hm = thn.build(_rfactor_local, target="cuda")
    a = np.arange(16, dtype="float32").reshape(2, 8)
    expected = np.zeros(2, "float32")
    for j in range(8):  # the IR's order: thread 0 first
        expected += a[:, j]
    _check_every_stage(hm, [a, np.zeros(2, "float32")], [expected])


# ---------------------------------------------------------------- B: blockIdx over rows around a row sum
@T.prim_func(s_tir=True)
def _row_sum_per_block(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4,), "float32")):
    for i in T.thread_binding(4, thread="blockIdx.x"):
        for k in T.thread_binding(16, thread="threadIdx.x"):
            with T.sblock("B"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi, vk]


def test_thread_allreduce_result_counts_as_a_write_of_each_block():
    """Class B: after LowerCrossThreadReduction every block writes its allreduce result into the same
    ``cross_thread_B[0]``; fast mode ran the blocks as lanes (shape mismatch)."""
    hm = thn.build(_row_sum_per_block, target="cuda")
    a = np.random.default_rng(0).uniform(-1, 1, (4, 16)).astype("float32")
    _check_every_stage(hm, [a, np.zeros(4, "float32")], [a.sum(axis=1)], rtol=1e-5)


# ---------------------------------------------------------------- D: a host loop around a kernel launch
@T.prim_func
def _host_loop_around_launch(A: T.Buffer((32,), "float32")):
    for it in range(3):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            A[tx] = A[tx] * T.float32(2) + T.Cast("float32", it)


def test_host_loop_around_a_launch_stays_serial():
    """Class D: after SplitHostDevice the loop body is a launch whose accesses the dependence test
    did not see; fast mode ran the iterations as lanes and passed ``it`` as an array."""
    hm = thn.build(_host_loop_around_launch, target="cuda")
    a = np.random.default_rng(0).uniform(-1, 1, 32).astype("float32")
    expected = a.copy()
    for it in range(3):
        expected = expected * np.float32(2) + np.float32(it)
    assert any(s.module_functions for s in _emulated_stages(hm))  # a stage launches a device kernel
    _check_every_stage(hm, [a], [expected])


# ---------------------------------------------------------------- G: allreduce of two values (argmax)
@T.prim_func(s_tir=True)
def _argmax_over_threads(x: T.Buffer((3, 16), "float32"), x_red: T.Buffer((3,), "int32")):
    for ax0 in T.thread_binding(3, thread="blockIdx.x"):
        with T.sblock("row"):
            vr = T.axis.spatial(3, ax0)
            t0 = T.sblock_alloc_buffer((1,), "int32", scope="shared")
            t1 = T.sblock_alloc_buffer((1,), "float32", scope="shared")
            for k1 in T.thread_binding(16, thread="threadIdx.x"):
                with T.sblock("x_red_temp"):
                    v_k1 = T.axis.reduce(16, k1)
                    with T.init():
                        t0[0] = -1
                        t1[0] = T.float32(-3.4028234663852886e38)
                    v0: T.let[T.int32] = T.Select(t1[0] > x[vr, v_k1] or t1[0] == x[vr, v_k1] and t0[0] < v_k1,
                                                  t0[0], v_k1)
                    v1: T.let[T.float32] = T.Select(t1[0] > x[vr, v_k1], t1[0], x[vr, v_k1])
                    t0[0] = v0
                    t1[0] = v1
            for tx in T.thread_binding(16, thread="threadIdx.x"):
                with T.sblock("x_red"):
                    T.where(tx == 0)
                    x_red[vr] = t0[0]


def test_thread_allreduce_of_two_values():
    """Class G: argmax's value/index pair reduced across threads (``tvm_thread_allreduce`` with two
    values) was refused; ties pick the lowest index."""
    hm = thn.build(_argmax_over_threads, target="cuda")
    x = np.random.default_rng(0).integers(0, 4, (3, 16)).astype("float32")  # many ties
    _check_every_stage(hm, [x, np.zeros(3, "int32")], [np.argmax(x, axis=1).astype("int32")])


# ---------------------------------------------------------------- scalar size parameters in shape expressions
@T.prim_func(s_tir=True)
def _transpose_scalar_sizes(a: T.handle, m: T.int64, n: T.int64, b: T.handle):
    concat = T.match_buffer(a, (m + n, 2), "float32")
    out = T.match_buffer(b, (2, m + n), "float32")
    for i, j in T.grid(m + n, 2):
        with T.sblock("T"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vj, vi] = concat[vi, vj]


def test_scalar_size_parameter_in_a_shape_expression():
    """Relax passes ``m`` and ``n`` as scalars when a buffer's shape is only ``m + n``: the
    arguments bind (it raised KeyError 'm') and every stage matches the native build."""
    hm = thn.build(_transpose_scalar_sizes)
    a = np.random.default_rng(0).uniform(-1, 1, (5, 2)).astype("float32")
    expected = hm.run_native(a, 3, 2, np.zeros((2, 5), "float32")).copy()
    np.testing.assert_array_equal(expected, a.T)
    _check_every_stage(hm, [a, 3, 2, np.zeros((2, 5), "float32")], [expected])


# ---------------------------------------------------------------- J: a size a device kernel declares but is not passed
@T.prim_func(s_tir=True)
def _concat_symbolic(a: T.handle, b: T.handle, c: T.handle):
    m, n = T.int64(), T.int64()
    A = T.match_buffer(a, (m, T.int64(4)), "float32")
    B = T.match_buffer(b, (n, T.int64(4)), "float32")
    C = T.match_buffer(c, (m + n, T.int64(4)), "float32")
    for i, j in T.grid(m + n, T.int64(4)):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = T.if_then_else(vi < m, A[vi, vj], B[vi - m, vj])


def test_device_kernel_declares_a_size_it_is_not_passed():
    """Class J: after SplitHostDevice the kernel declares ``B`` with a size ``cse_v2`` (n * 4) that it
    is not passed and never reads ("free variable" at ConvertSSA); the view's size comes from the
    storage the host passes."""
    import tvm
    from tvm.s_tir import dlight as dl

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    with target:
        mod = dl.ApplyDefaultSchedule(dl.gpu.Fallback())(tvm.IRModule({"main": _concat_symbolic}))
    hm = thn.build(mod, target=target)
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (3, 4)).astype("float32"), rng.uniform(-1, 1, (2, 4)).astype("float32")
    _check_every_stage(hm, [a, b, np.zeros((5, 4), "float32")], [np.concatenate([a, b])])


# ---------------------------------------------------------------- A': reduction across threads into local memory
@T.prim_func(s_tir=True)
def _reduce_into_local(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4,), "float32")):
    acc = T.sblock_alloc_buffer((4,), scope="local")
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(16, thread="threadIdx.x"):
            with T.sblock("sum"):
                vr, vk = T.axis.remap("SR", [bx, tx])
                with T.init():
                    acc[vr] = T.float32(0)
                acc[vr] = acc[vr] + A[vr, vk]
        with T.sblock("avg"):
            vr = T.axis.spatial(4, bx)
            B[vr] = acc[vr] * T.float32(0.0625)


def test_reduction_across_threads_into_local_memory_is_one_accumulator():
    """Class A, dlight's adaptive_avg_pool2d: a block that reduces across threads into a ``local``
    buffer (before LowerCrossThreadReduction) leaves the total in every thread's copy; stage 0 had
    each thread sum its own element only (0.017 instead of 0.015)."""
    hm = thn.build(_reduce_into_local, target="cuda")
    a = np.random.default_rng(0).uniform(-1, 1, (4, 16)).astype("float32")
    stage0 = np.zeros(4, "float32")
    for k in range(16):
        stage0 += a[:, k]
    # From StorageRewrite on the accumulator is a DeclBuffer view of a local allocation: issue 12
    # class K, fixed on another branch.
    _check_every_stage(hm, [a, np.zeros(4, "float32")], [stage0 * np.float32(0.0625)], rtol=1e-5,
                       until="tirx.StorageRewrite")
    args = [a, np.zeros(4, "float32")]
    hm.emulate(*args, stage=0, mode="exact")
    np.testing.assert_array_equal(args[1], stage0 * np.float32(0.0625))  # thread order, bit for bit


# ---------------------------------------------------------------- C: a view of a buffer of vectors
@T.prim_func
def _vector_view(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    buf = T.alloc_buffer((4,), "float32x16")
    view = T.decl_buffer((4,), "float32x16", data=buf.data)
    for i in range(4):
        view[i] = A[T.Ramp(i * 16, 1, 16)]
    for i in range(4):
        B[T.Ramp(i * 16, 1, 16)] = buf[i] * T.Broadcast(T.float32(2), 16)


def test_view_of_a_buffer_of_vectors():
    """Class C (dlight.cpu rms_norm after StorageRewrite): a float32x16 view of a float32x16
    allocation keeps its row of lanes (it became ``buf.reshape(4)`` of a (4, 16) array)."""
    hm = thn.build(_vector_view)
    a = np.random.default_rng(0).uniform(-1, 1, 64).astype("float32")
    expected = hm.run_native(a, np.zeros(64, "float32")).copy()
    np.testing.assert_array_equal(expected, a * 2)
    _check_every_stage(hm, [a, np.zeros(64, "float32")], [expected])


# ---------------------------------------------------------------- N: fast mode never slower than exact
@T.prim_func(s_tir=True)
def _dlight_cpu_matmul(x: T.Buffer((7, 128), "float32"), w: T.Buffer((128, 128), "float32"),
                       out: T.Buffer((7, 128), "float32")):
    for ax0_ax1_fused in T.parallel(896):
        for ax0, ax1, ax2_0 in T.grid(1, 1, 8):
            for ax2_1 in T.serial(16, annotations={"pragma_auto_unroll_max_step": 16, "pragma_unroll_explicit": 1}):
                with T.sblock("matmul"):
                    v0 = T.axis.spatial(7, ax0_ax1_fused // 128 + ax0)
                    v1 = T.axis.spatial(128, ax0_ax1_fused % 128 + ax1)
                    v2 = T.axis.reduce(128, ax2_0 * 16 + ax2_1)
                    with T.init():
                        out[v0, v1] = T.float32(0)
                    out[v0, v1] = out[v0, v1] + x[v0, v2] * w[v2, v1]


def test_fast_mode_is_not_slower_than_exact_on_a_dlight_cpu_matmul():
    """Class N: dlight.cpu's fused loop writes ``out[f // 128, f % 128]``: independent only through the
    flattened index, so fast mode ran it serially with unit loops as 1-element lanes (7.4 s fast vs
    4.2 s exact in the issue).  Now the fused loop is lanes and unit loops stay serial."""
    import time

    hm = thn.build(_dlight_cpu_matmul)
    rng = np.random.default_rng(0)
    x, w = rng.uniform(-1, 1, (7, 128)).astype("float32"), rng.uniform(-1, 1, (128, 128)).astype("float32")
    expected = hm.run_native(x, w, np.zeros((7, 128), "float32")).copy()
    seconds = {}
    for mode in ("fast", "exact"):
        out = np.zeros((7, 128), "float32")
        hm.emulate(x, w, out, mode=mode)  # generation and loading are not part of the run
        out[...] = 0
        start = time.perf_counter()
        hm.emulate(x, w, out, mode=mode)
        seconds[mode] = time.perf_counter() - start
        np.testing.assert_array_equal(out, expected, err_msg=mode)
    assert "ax0_ax1_fused" in hm.stage(0).fast_source().split("Fast mode:")[1].split("\n")[0]
    assert seconds["fast"] < seconds["exact"], seconds


# ---------------------------------------------------------------- a loop whose trip count differs between threads
@T.prim_func
def _double_until_bound(A: T.Buffer((2, 8), "int32"), bound: T.Buffer((2, 8), "int32"),
                        B: T.Buffer((2, 8), "int32"), trips: T.Buffer((2, 8), "int32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(8, thread="threadIdx.x"):
            value = T.alloc_buffer((1,), "int32", scope="local")
            count = T.alloc_buffer((1,), "int32", scope="local")
            value[0] = A[bx, tx]
            count[0] = 0
            while value[0] < bound[bx, tx]:
                value[0] = value[0] * 2
                count[0] = count[0] + 1
            B[bx, tx] = value[0]
            trips[bx, tx] = count[0]


def test_while_loop_whose_trip_count_differs_between_threads():
    """topi's GPU merge sort: each thread doubles its value until it reaches its own bound, so the
    threads of a block loop 0 to 6 times; a thread stops for good when its condition fails (it was
    refused: "while loop whose condition differs between iterations")."""
    hm = thn.build(_double_until_bound, target="cuda")
    a = np.array([[1, 1, 2, 3, 1, 5, 2, 7], [1, 2, 3, 4, 5, 6, 7, 8]], "int32")
    bound = (np.arange(8, dtype="int32") * 9 + 1) * np.array([[1], [2]], "int32")
    expected_b, expected_trips = a.copy(), np.zeros_like(a)
    for index in np.ndindex(a.shape):
        while expected_b[index] < bound[index]:
            expected_b[index] *= 2
            expected_trips[index] += 1
    assert len(set(expected_trips[0].tolist())) > 3  # the threads of a block loop differently often
    _check_every_stage(hm, [a, bound, np.zeros_like(a), np.zeros_like(a)], [expected_b, expected_trips])


@T.prim_func
def _per_thread_loop_and_branch(A: T.Buffer((16,), "int32"), B: T.Buffer((8,), "int32")):
    for tx in T.thread_binding(8, thread="threadIdx.x"):
        total = T.alloc_buffer((1,), "int32", scope="local")
        total[0] = 0
        for k in range(tx, tx * 2):  # thread tx sums A[tx:2 tx]
            if total[0] < 20:  # the branch writes what its condition reads
                total[0] = total[0] + A[k] * 3
            else:
                total[0] = total[0] - A[k]
        B[tx] = total[0]


def test_loop_bounds_and_branch_that_differ_between_threads():
    """The merge sort's serial loop over each thread's share (bounds that depend on ``threadIdx.x``)
    with a branch that updates the counter it tests: each thread decides its branch once (the else
    branch saw the counter the then branch had just written)."""
    hm = thn.build(_per_thread_loop_and_branch, target="cuda")
    a = np.arange(16, dtype="int32") % 7 + 1
    expected = np.zeros(8, "int32")
    for tx in range(8):
        for k in range(tx, 2 * tx):
            expected[tx] += a[k] * 3 if expected[tx] < 20 else -a[k]
    _check_every_stage(hm, [a, np.zeros(8, "int32")], [expected])


@T.prim_func
def _barrier_in_divergent_while(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
    for tx in T.thread_binding(8, thread="threadIdx.x"):
        value = T.alloc_buffer((1,), "int32", scope="local")
        value[0] = 0
        while value[0] < A[tx]:
            T.evaluate(T.tvm_storage_sync("shared"))
            value[0] = value[0] + 1
        B[tx] = value[0]


def test_barrier_in_a_while_loop_not_all_threads_run_is_an_error():
    """A barrier inside a loop that threads leave at different trips is one not all threads reach:
    an error, not a result; with every thread running the same trips it is fine."""
    import pytest

    hm = thn.build(_barrier_in_divergent_while, target="cuda")
    for mode in ("exact", "fast"):
        same = np.full(8, 3, "int32")
        out = np.zeros(8, "int32")
        hm.emulate(same, out, mode=mode)
        np.testing.assert_array_equal(out, same)
        with pytest.raises(Exception, match="not reached by all threads"):
            hm.emulate(np.arange(8, dtype="int32"), np.zeros(8, "int32"), mode=mode)


def test_topi_gpu_merge_sort_with_merge_rounds():
    """topi's GPU sort beyond one block's 128 elements merges sorted runs: a binary search (while)
    and a serial loop over each thread's share, per thread, in a device kernel launched with a
    computed block size (its per-thread memory had one copy for all threads after SplitHostDevice)."""
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op, spec

    from tvm_hybrid_nb import zoo

    class Sort(nn.Module):
        def forward(self, x):
            return op.sort(x, axis=-1)

    kernel = next(k for k in zoo.collect_kernels([("sort", Sort(), {"x": spec.Tensor((1, 300), "float32")})])
                  if k.cuda is not None)
    target, mod = zoo.schedule(kernel.cuda, "dlight-gpu")
    hm = thn.build(mod, target=target)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 300)).astype("float32")
    _check_every_stage(hm, [x, np.zeros_like(x)], [np.sort(x, axis=-1)], check=False)
