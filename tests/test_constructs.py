"""Constructs of real TVM kernels (issue 12) that have an exact Python meaning: each emulates like
the native llvm build (or numpy, for cuda) at every changed stage before MakePackedAPI, in exact and
fast mode, bit-identically."""
from __future__ import annotations

import re
import tracemalloc

import numpy as np
import pytest
import tvm
from tvm import s_tir, te, topi
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import ArgumentShapeError, EmulationError


def _copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _same(got, want) -> bool:
    if got.dtype.kind == "f":
        return np.array_equal(got, want, equal_nan=True)
    return np.array_equal(got, want)


def check_every_stage(obj, args, target="llvm", reference=None, min_stages=1):
    """Emulate every changed stage before MakePackedAPI in both modes: equal to the native run (or
    ``reference(args)``), and exact and fast bit-identical.  A kernel that returns a value
    (``hm.returns``) returns the native run's value, of the same Python type.  Returns the HybridModule."""
    hm = thn.build(obj, target=target)
    returned = None
    if reference is None:
        want = _copies(args)
        result = hm.run_native(*want)
        if hm.returns is not None:
            returned = result[-1] if isinstance(result, tuple) else result
    else:
        want = reference(_copies(args))
    checked = 0
    for stage in hm.stages[:hm.packed_api_index]:
        if not (stage.changed or stage.index == 0):
            continue
        assert stage.emulatable, f"{stage.label}: {stage.reason}"
        results = {}
        for mode in ("exact", "fast"):
            got = _copies(args)
            result = hm.emulate(*got, stage=stage.index, mode=mode)
            for g, w, p in zip(got, want, hm.params):
                if isinstance(g, np.ndarray):
                    assert _same(g, np.asarray(w)), f"{stage.label} {mode}: {p.name} differs"
            if hm.returns is not None and reference is None:
                value = result[-1] if isinstance(result, tuple) else result
                assert type(value) is type(returned), f"{stage.label} {mode}: returns a {type(value).__name__}"
                assert _same(np.asarray(value), np.asarray(returned)), \
                    f"{stage.label} {mode}: returns {value!r}, native {returned!r}"
            results[mode] = got
        for e, f in zip(results["exact"], results["fast"]):
            if isinstance(e, np.ndarray):
                assert e.tobytes() == f.tobytes(), f"{stage.label}: exact and fast differ"
        checked += 1
    assert checked >= min_stages
    return hm


def _rand(*shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


# ----------------------------------------------------------------------------- C, K, F: views and vectors
def test_vector_dtype_view_of_a_vector_dtype_allocation():
    # StorageRewrite on dlight.cpu rms_norm: float32x16 storage viewed as float32x16 again.
    @T.prim_func
    def f(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        buf = T.alloc_buffer((4,), "float32x16")
        v = T.decl_buffer((4,), "float32x16", data=buf.data)
        for i in range(4):
            v[i] = A[T.Ramp(i * 16, 1, 16)] * T.Broadcast(T.float32(2), 16)
        for i in range(4):
            B[T.Ramp(i * 16, 1, 16)] = buf[3 - i] + T.Broadcast(T.float32(1), 16)

    check_every_stage(f, [_rand(64), np.zeros(64, "float32")])


def test_vector_dtype_parameter_buffers():
    # TVM's tests pass float32x4 parameter buffers (PointerValueTypeRewrite's expected output): the array
    # has a last axis of lanes, handed to the native kernel as a float32x4 tensor; a Shuffle of one lane
    # is a scalar, and VectorizeLoop stores several vectors as one (float32x16).
    @T.prim_func
    def f(A: T.Buffer((4,), "float32x4"), B: T.Buffer((4,), "float32"), C: T.Buffer((4,), "float32x4"),
          D: T.Buffer((16,), "float32")):
        for i in range(4):
            B[i] = T.Shuffle([A[i]], [1]) + T.float32(1)
        for i in range(2):
            for j in T.vectorized(4):
                C[j] = T.Broadcast(T.float32(i), 4)
        for j in range(4):
            D[T.Ramp(j * 4, 1, 4)] = A[j] * T.Broadcast(T.float32(2), 4)

    a = _rand(4, 4)
    hm = check_every_stage(f, [a, np.zeros(4, "float32"), np.zeros((4, 4), "float32"), np.zeros(16, "float32")],
                           min_stages=2)
    assert [p.shape for p in hm.params] == [(4, 4), (4,), (4, 4), (16,)]
    b, c, d = hm.run_native(a, np.zeros(4, "float32"), np.zeros((4, 4), "float32"), np.zeros(16, "float32"))
    np.testing.assert_array_equal(b, a[:, 1] + np.float32(1))  # numpy: the independent truth
    np.testing.assert_array_equal(c, np.ones((4, 4), "float32"))
    np.testing.assert_array_equal(d, (a * np.float32(2)).ravel())


def test_view_of_a_threads_local_allocation():
    @T.prim_func
    def f(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for bx in T.thread_binding(2, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                buf = T.alloc_buffer((1,), "float32", scope="local")
                v = T.decl_buffer((1,), "float32", data=buf.data, scope="local")
                v[0] = A[bx * 32 + tx] * T.float32(3)
                B[bx * 32 + tx] = buf[0] + T.float32(1)

    check_every_stage(f, [_rand(64), np.zeros(64, "float32")], target="cuda",
                      reference=lambda a: [a[0], a[0] * np.float32(3) + np.float32(1)])


def test_a_threads_vector_accumulator_indexed_per_lane():
    # dlight Matmul: a thread's float32x4 local accumulator.
    @T.prim_func
    def f(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32")):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            acc = T.alloc_buffer((2,), "float32x4", scope="local")
            for k in range(2):
                acc[k] = A[T.Ramp(tx * 8 + k * 4, 1, 4)] * T.Broadcast(T.float32(2), 4)
            for k in range(2):
                acc[k] = acc[k] + acc[1 - k]
            for k in range(2):
                B[T.Ramp(tx * 8 + k * 4, 1, 4)] = acc[k]

    def reference(args):
        x = (args[0] * np.float32(2)).reshape(32, 2, 4)
        y = x.copy()
        y[:, 0] = x[:, 0] + x[:, 1]
        y[:, 1] = x[:, 1] + y[:, 0]
        return [args[0], y.reshape(-1)]

    check_every_stage(f, [_rand(256), np.zeros(256, "float32")], target="cuda", reference=reference)


def test_a_scheduled_vector_local_accumulator_from_storage_rewrite_on():
    # cache_write(..., "local") under a threadIdx.x loop, vectorized: StorageRewrite makes it float32x4.
    A = te.placeholder((32, 16), "float32", name="A")
    B = te.placeholder((16, 32), "float32", name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((32, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    block = sch.get_sblock("C")
    i, j, kk = sch.get_loops(block)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 4])
    sch.reorder(io, jo, ii, kk, ji)
    sch.bind(io, "blockIdx.x")
    sch.bind(jo, "threadIdx.x")
    cache = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(cache, jo)
    sch.vectorize(ji)
    sch.vectorize(sch.get_loops(cache)[-1])

    def reference(args):  # float32, k in order, as every thread accumulates
        c = np.zeros((32, 32), "float32")
        for step in range(16):
            c = c + args[0][:, step:step + 1] * args[1][step:step + 1, :]
        return [args[0], args[1], c]

    hm = check_every_stage(sch, [_rand(32, 16), _rand(16, 32, seed=1), np.zeros((32, 32), "float32")],
                           target="cuda", reference=reference)
    assert "float32x4" in hm.stage("tirx.StorageRewrite").script


def test_flat_view_indexed_past_its_size_inside_its_merged_allocation():
    # StorageRewrite merges allocations and indexes a view (8,) at 8 + i: bounds are the allocation's.
    @T.prim_func
    def f(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        buf = T.alloc_buffer((16,), "float32")
        v = T.decl_buffer((8,), "float32", data=buf.data)
        for i in range(8):
            v[i] = A[i] + T.float32(1)
            v[8 + i] = A[8 + i] * T.float32(2)
        for i in range(16):
            B[i] = buf[i]

    hm = check_every_stage(f, [_rand(16), np.zeros(16, "float32")])
    with pytest.raises(EmulationError, match="out-of-bounds"):  # the allocation's own bounds still hold
        @T.prim_func
        def g(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
            buf = T.alloc_buffer((16,), "float32")
            v = T.decl_buffer((8,), "float32", data=buf.data)
            for i in range(9):
                v[8 + i] = A[i]
            for i in range(16):
                B[i] = buf[i]

        thn.build(g).emulate(_rand(16), np.zeros(16, "float32"))
    assert hm.packed_api_index > 0


def test_views_at_the_address_of_an_element():
    @T.prim_func
    def f(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32")):
        for i in range(4):
            row = T.decl_buffer((3,), "float32", data=T.address_of(A[i, 1]))
            for j in range(3):
                B[i, j] = row[j] * T.float32(2)

    check_every_stage(f, [_rand(4, 4), np.zeros((4, 4), "float32")])


# ----------------------------------------------------------------------------- E: strided allocations
def test_storage_align_pads_a_cache_with_strides():
    @T.prim_func(s_tir=True)
    def f(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32")):
        for i, j in T.grid(16, 16):
            with T.sblock("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * T.float32(2)

    sch = s_tir.Schedule(f)
    cache = sch.cache_read(sch.get_sblock("B"), 0, "global")
    sch.storage_align(cache, 0, axis=0, factor=8, offset=1)
    hm = check_every_stage(sch, [_rand(16, 16), np.zeros((16, 16), "float32")])
    assert "strides=(17, 1)" in hm.stage("s_tir.CompactBufferAllocation").script


def test_strided_allocation_inside_an_independent_loop():
    @T.prim_func
    def f(A: T.Buffer((8, 4, 4), "float32"), B: T.Buffer((8, 4, 4), "float32")):
        for n in range(8):
            tile = T.alloc_buffer((4, 4), "float32", strides=(5, 1))
            for i, j in T.grid(4, 4):
                tile[j, i] = A[n, i, j]
            for i, j in T.grid(4, 4):
                B[n, i, j] = tile[i, j] + T.float32(1)

    check_every_stage(f, [_rand(8, 4, 4), np.zeros((8, 4, 4), "float32")])


# ----------------------------------------------------------------------------- H: parameter layouts
@pytest.mark.parametrize("scan", [topi.cumsum, topi.cumprod])
def test_topi_scans_with_an_offset_parameter_buffer(scan):
    X = te.placeholder((4, 6), "float32", name="X")
    func = te.create_prim_func([X, scan(X, axis=1)])
    assert not isinstance(func.params[0].elem_offset, tvm.tirx.IntImm)  # offset_factor=1: a variable
    check_every_stage(func, [_rand(4, 6), np.zeros((4, 6), "float32")])


def test_parameter_buffers_with_variable_offset():
    @T.prim_func
    def f(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (4, 4), "float32", offset_factor=1)
        B = T.match_buffer(b, (4, 4), "float32", offset_factor=1)
        for i, j in T.grid(4, 4):
            B[i, j] = A[i, j] + A[j, i]

    check_every_stage(f, [_rand(4, 4), np.zeros((4, 4), "float32")])


# ----------------------------------------------------------------------------- I: TVM's sort functions
def _sort_outputs():
    X = te.placeholder((3, 9), "float32", name="X")
    return X, {
        "sort ascending": [topi.sort(X, axis=1, is_ascend=True)],
        "sort descending axis 0": [topi.sort(X, axis=0, is_ascend=False)],
        "argsort descending int32": [topi.argsort(X, axis=1, is_ascend=False, dtype="int32")],
        "argsort float32 indices": [topi.argsort(X, axis=-1, is_ascend=True, dtype="float32")],
        "topk both": list(topi.topk(X, k=4, axis=1, ret_type="both", is_ascend=False, dtype="int64")),
        "topk values ascending": [topi.topk(X, k=2, axis=0, ret_type="values", is_ascend=True)],
        "topk indices, k=0 means all": [topi.topk(X, k=0, axis=1, ret_type="indices", is_ascend=False,
                                                  dtype="int32")],
    }


@pytest.mark.parametrize("case", list(_sort_outputs()[1]))
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_tvm_sort_argsort_and_topk_are_stable_like_the_runtime(case, dtype):
    X, cases = _sort_outputs()
    if dtype != "float32":
        X = te.placeholder((3, 9), dtype, name="X")
        cases = {k: v for k, v in zip(cases, [[topi.sort(X, axis=1, is_ascend=True)],
                                              [topi.sort(X, axis=0, is_ascend=False)],
                                              [topi.argsort(X, axis=1, is_ascend=False, dtype="int32")],
                                              [topi.argsort(X, axis=-1, is_ascend=True, dtype="float32")],
                                              list(topi.topk(X, k=4, axis=1, ret_type="both", is_ascend=False,
                                                             dtype="int64")),
                                              [topi.topk(X, k=2, axis=0, ret_type="values", is_ascend=True)],
                                              [topi.topk(X, k=0, axis=1, ret_type="indices", is_ascend=False,
                                                         dtype="int32")]])}
    outs = cases[case]
    func = te.create_prim_func([X, *outs])
    data = np.random.default_rng(1).integers(-3, 4, (3, 9)).astype(dtype)  # many ties
    args = [data] + [np.zeros([int(d) for d in o.shape], str(o.dtype)) for o in outs]
    hm = check_every_stage(func, args)
    assert [p.is_output for p in hm.params] == [False] + [True] * len(outs)


def test_sorting_nan_is_refused_and_other_packed_calls_by_name():
    X, cases = _sort_outputs()
    hm = thn.build(te.create_prim_func([X, *cases["sort ascending"]]))
    data = _rand(3, 9)
    data[1, 2] = np.nan
    with pytest.raises(EmulationError, match="NaN"):
        hm.emulate(data, np.zeros((3, 9), "float32"))

    @T.prim_func
    def f(A: T.Buffer((4,), "float32")):
        T.evaluate(T.call_packed("my.custom.function", A.data))

    stage = thn.build(f).stages[0]
    assert not stage.emulatable and "my.custom.function" in stage.reason


# ----------------------------------------------------------------------------- L and other TIR constructs
def test_scan_with_an_opaque_block_iterator():
    @T.prim_func(s_tir=True)
    def f(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        with T.sblock("scan"):
            T.reads(A[0:16])
            T.writes(B[0:16])
            B[0] = A[0]
            for i in range(1, 16):
                with T.sblock("step"):
                    vi = T.axis.opaque(16, i)
                    T.reads(B[vi - 1], A[vi])
                    T.writes(B[vi])
                    B[vi] = B[vi - 1] + A[vi]

    check_every_stage(f, [_rand(16), np.zeros(16, "float32")])


def test_match_buffer_with_offsets():
    @T.prim_func(s_tir=True)
    def f(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32")):
        for i, j in T.grid(4, 4):
            with T.sblock("tile"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi * 2:vi * 2 + 2, vj * 2:vj * 2 + 2])
                T.writes(B[vi * 2:vi * 2 + 2, vj * 2:vj * 2 + 2])
                Asub = T.match_buffer(A[vi * 2:vi * 2 + 2, vj * 2:vj * 2 + 2], (2, 2), offset_factor=1)
                Bsub = T.match_buffer(B[vi * 2:vi * 2 + 2, vj * 2:vj * 2 + 2], (2, 2), offset_factor=1)
                for ii, jj in T.grid(2, 2):
                    Bsub[ii, jj] = Asub[jj, ii] * T.float32(2) + T.Cast("float32", ii)

    hm = check_every_stage(f, [_rand(8, 8), np.zeros((8, 8), "float32")])
    assert [p.is_output for p in hm.params] == [False, True]  # written only through Bsub


def test_match_buffer_whose_strides_and_offset_are_variables():
    # Tensor intrinsics declare strides=[s0, 1] and elem_offset: the region's place in its source.
    @T.prim_func(s_tir=True)
    def f(A: T.Buffer((8, 8), "float32"), B: T.Buffer((8, 8), "float32")):
        for i, j in T.grid(4, 4):
            with T.sblock("tile"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi * 2:vi * 2 + 2, vj * 2:vj * 2 + 2])
                T.writes(B[vi * 2:vi * 2 + 2, vj * 2:vj * 2 + 2])
                s0 = T.int32()
                off = T.int32()
                Asub = T.match_buffer(A[vi * 2:vi * 2 + 2, vj * 2:vj * 2 + 2], (2, 2), strides=[s0, 1],
                                      elem_offset=off)
                Bsub = T.match_buffer(B[vi * 2:vi * 2 + 2, vj * 2:vj * 2 + 2], (2, 2), offset_factor=1)
                for ii, jj in T.grid(2, 2):
                    Bsub[ii, jj] = Asub[jj, ii] * T.Cast("float32", s0) + T.Cast("float32", off)

    check_every_stage(f, [_rand(8, 8), np.zeros((8, 8), "float32")])


def test_scalar_parameters_as_buffer_sizes():
    @T.prim_func
    def in_expression(x: T.handle, y: T.handle, n: T.int32):
        X = T.match_buffer(x, (2, n * 4), "float32")
        Y = T.match_buffer(y, (2, n * 4), "float32")
        for i, j in T.grid(2, n * 4):
            Y[i, j] = X[i, j] + T.Cast("float32", n)

    check_every_stage(in_expression, [_rand(2, 12), np.zeros((2, 12), "float32"), 3])

    @T.prim_func
    def plain(n: T.int32, x: T.handle, y: T.handle):
        X = T.match_buffer(x, (n, 2), "float32")
        Y = T.match_buffer(y, (n, 2), "float32")
        for i, j in T.grid(n, 2):
            Y[i, j] = X[i, j] + T.Cast("float32", n)

    hm = check_every_stage(plain, [5, _rand(5, 2), np.zeros((5, 2), "float32")])
    with pytest.raises(ArgumentShapeError, match="n"):
        hm.emulate(4, _rand(5, 2), np.zeros((5, 2), "float32"))


def test_break_continue_step_assume_clz_and_loop_partition_hints():
    @T.prim_func
    def f(A: T.Buffer((16,), "int32"), B: T.Buffer((16,), "int32"), C: T.Buffer((16,), "int32")):
        for i in range(16):
            for j in range(16):
                if A[j] == i:
                    T.break_loop()
                if A[j] % 2 == 0:
                    T.continue_loop()
                B[i] = B[i] + A[j]
        for i in T.serial(1, 15, step=3):
            T.evaluate(T.assume(A[i] >= 0))
            C[i] = T.clz(A[i] + 1)
        for i in range(16):
            if T.ignore_loop_partition(i < 10):
                C[i] = C[i] + T.clz(T.int32(-1) - i)

    args = [np.random.default_rng(2).integers(0, 16, 16).astype("int32"), np.zeros(16, "int32"),
            np.zeros(16, "int32")]
    check_every_stage(f, args)

    @T.prim_func
    def g(A: T.Buffer((4,), "int32"), B: T.Buffer((4,), "int32")):
        for i in range(4):
            B[i] = T.clz(A[i])

    with pytest.raises(EmulationError, match="clz"):  # undefined natively (it returns garbage)
        thn.build(g).emulate(np.array([3, 0, 1, 2], "int32"), np.zeros(4, "int32"))


def test_masked_loads_and_stores():
    @T.prim_func
    def f(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        for i in range(4):
            # Lanes a masked load leaves out are undefined natively: only loaded lanes are stored.
            T.evaluate(T.masked_store(B, A[T.Ramp(i * 4, 1, 4)] + T.masked_load(
                "float32x4", A, T.Ramp(12 - i * 4, 1, 4), T.Broadcast(i < 3, 4) | (T.Ramp(0, 1, 4) == 0)),
                T.Ramp(i * 4, 1, 4), T.Broadcast(i < 2, 4) | (T.Ramp(0, 1, 4) == T.Broadcast(0, 4))))

    check_every_stage(f, [_rand(16), np.zeros(16, "float32")])


def test_active_lane_masks_predicate_a_vectorized_tail():
    # VectorizeLoop's predicated tail (SVE targets): lanes i with i_0 * 4 + i < 14 are loaded and
    # stored; B[14] and B[15] keep their values.
    @T.prim_func
    def f(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        for i_0 in range(4):
            T.evaluate(T.masked_store(B, T.masked_load("float32x4", A, T.Ramp(i_0 * 4, 1, 4),
                                                       T.get_active_lane_mask("uint1x4", i_0 * 4, 14))
                                      + T.Broadcast(T.float32(1), 4), T.Ramp(i_0 * 4, 1, 4),
                                      T.get_active_lane_mask("uint1x4", i_0 * 4, 14)))

    a, b = _rand(16), _rand(16)
    want = b.copy()
    want[:14] = a[:14] + np.float32(1)
    check_every_stage(f, [a, b], reference=lambda args: [args[0], want])


def test_loops_nested_deeper_than_python_compiles():
    # MetaSchedule conv kernels nest more than 20 loops; Python compiles at most 20 blocks.
    shape = (2,) + (1,) * 10
    A = te.placeholder(shape, "float32", name="A")
    k = [te.reduce_axis((0, d), name=f"k{i}") for i, d in enumerate(shape)]
    B = te.compute(shape, lambda *i: te.sum(A[tuple(k)] * A[i], axis=k), name="B")
    hm = check_every_stage(te.create_prim_func([A, B]), [_rand(*shape), np.zeros(shape, "float32")], min_stages=3)
    assert "_nest_" in hm.get_source(0)


@T.prim_func
def large_allocation_per_iteration(A: T.Buffer((2048,), "float32"), B: T.Buffer((2048,), "float32")):
    # Every iteration uses element 0 of its own tmp: lanes cannot share one copy.
    for i in range(2048):
        tmp = T.alloc_buffer((1048576,), "float32")
        tmp[0] = A[i] * T.float32(2)
        B[i] = tmp[0] + T.float32(1)


def test_fast_mode_does_not_copy_a_large_allocation_per_iteration():
    hm = thn.build(large_allocation_per_iteration)
    a = _rand(2048)
    tracemalloc.start()
    try:
        out = hm.emulate(a, np.zeros(2048, "float32"), mode="fast").copy()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"fast mode took {peak >> 20} MiB"
    np.testing.assert_array_equal(out, hm.run_native(a, np.zeros(2048, "float32")))


@T.prim_func(s_tir=True)
def whole_buffer_in_the_innermost_block(A: T.Buffer((32, 16, 8, 4), "float32"), C: T.Buffer((32, 16), "float32")):
    # TVM's test_tir_schedule_cache_read_write `reduce` (there 128**4): PlanAndUpdateBufferAllocation-
    # Location moves B into the block under k, so every (i, j, k) allocates all of B; each iteration
    # of i and j touches only B[i, j, :].
    B = T.sblock_alloc_buffer((32, 16, 8), dtype="float32")
    for i, j, k in T.grid(32, 16, 8):
        for l in range(4):
            with T.sblock("B"):
                vi, vj, vk, vl = T.axis.remap("SSSR", [i, j, k, l])
                with T.init():
                    B[vi, vj, vk] = T.float32(0)
                B[vi, vj, vk] = B[vi, vj, vk] + A[vi, vj, vk, vl]
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + B[vi, vj, vk]


@T.prim_func(s_tir=True)
def buffer_shared_by_some_lanes(A: T.Buffer((16, 8, 4), "float32"), C: T.Buffer((16, 8), "float32")):
    # tmp is indexed by vi but not vj: the lanes of i may share one copy, those of j may not (each j
    # writes its own values to the same elements).
    for i, j in T.grid(16, 8):
        with T.sblock("outer"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj, 0:4])
            T.writes(C[vi, vj])
            tmp = T.sblock_alloc_buffer((16, 4))
            for k in range(4):
                with T.sblock("t"):
                    vk = T.axis.remap("S", [k])
                    tmp[vi, vk] = A[vi, vj, vk] * T.float32(2)
            for k in range(4):
                with T.sblock("c"):
                    vk = T.axis.remap("R", [k])
                    with T.init():
                        C[vi, vj] = T.float32(0)
                    C[vi, vj] = C[vi, vj] + tmp[vi, 3 - vk]


def test_an_allocation_each_lane_touches_apart_is_one_copy_and_exact():
    hm = check_every_stage(whole_buffer_in_the_innermost_block, [_rand(32, 16, 8, 4), np.zeros((32, 16), "float32")],
                           min_stages=5)
    source = hm.stage("PlanAndUpdateBufferAllocationLocation").fast_source()
    assert "B = alloc((32, 16, 8), 'float32')" in source  # not one (32, 16, 8) copy per lane


def test_an_allocation_some_lanes_touch_apart_is_shared_by_those_only_and_exact():
    check_every_stage(buffer_shared_by_some_lanes, [_rand(16, 8, 4), np.zeros((16, 8), "float32")], min_stages=5)


@T.prim_func(s_tir=True)
def predicated_split(A: T.Buffer((12, 16, 16), "float32"), B: T.Buffer((12, 16, 16), "float32")):
    # TVM's test_tir_schedule_split_fuse `elementwise_split_with_predicate`, smaller: j1 and
    # k0 * 6 + k1 each take one value more than their row holds, the predicate leaves it out.  Once
    # flattened (and after RenormalizeSplitPattern's `(k0 * 3 + k1 // 2) // 8 < 1`), only the
    # predicate keeps the iterations of i0, i1, i2 and j1 apart.
    for i0, i1, i2, j1, k0, k1 in T.grid(3, 2, 2, 17, 3, 6):
        with T.sblock("B"):
            vi = T.axis.spatial(12, i0 * 4 + i1 * 2 + i2)
            vj = T.axis.spatial(16, j1)
            vk = T.axis.spatial(16, k0 * 6 + k1)
            T.where(j1 < 16 and k0 * 6 + k1 < 16)
            B[vi, vj, vk] = A[vi, vj, vk] * T.float32(2.0)


@T.prim_func
def predicated_overlap(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    # The predicate lets k reach 16, the first element of the next j's row: iterations of j
    # accumulate into B[16] and B[32] one after another.
    for j, k0, k1 in T.grid(3, 3, 6):
        if k0 * 6 + k1 < 17:
            B[j * 16 + k0 * 6 + k1] = B[j * 16 + k0 * 6 + k1] + A[j * 16 + k0 * 6 + k1]


def test_a_predicated_split_keeps_its_lanes_at_every_stage_and_is_exact():
    check_every_stage(predicated_split, [_rand(12, 16, 16), np.zeros((12, 16, 16), "float32")], min_stages=8)


def test_a_predicate_that_lets_iterations_overlap_keeps_them_serial_and_exact():
    check_every_stage(predicated_overlap, [_rand(64), _rand(64, seed=1)])


def test_progress_reports_inside_the_outermost_loop():
    @T.prim_func
    def f(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64,), "float32")):
        for once in range(1):
            for i in range(64):
                for j in range(64):
                    B[i] = B[i] + A[i, j] * T.Cast("float32", once + 1)

    hm = thn.build(f)
    seen = []
    hm.emulate(_rand(64, 64), np.zeros(64, "float32"), progress=seen.append)
    assert len(seen) > 60 and seen == sorted(seen) and seen[-1] == pytest.approx(1.0)
    assert 0.4 < seen[len(seen) // 2] < 0.6


def test_a_long_serial_nest_reports_progress_from_its_inner_loops(monkeypatch):
    # MetaSchedule's conv3d: one iteration of the outer tile loops takes a minute; the loops inside
    # must move the progress too, or slow cannot be told from hung.
    from tvm_hybrid_nb import stage as hstage  # where a stage's kernels read the interval

    @T.prim_func
    def f(A: T.Buffer((8, 8), "float32"), B: T.Buffer((1,), "float32")):
        for a in range(2):
            for b in range(2):
                for c in range(4):
                    for d in range(8):
                        for e in range(8):
                            B[0] = B[0] + A[d, e] * T.Cast("float32", a + b + c)

    hm = thn.build(f)
    a = _rand(8, 8)
    want = hm.run_native(a, np.zeros(1, "float32"))
    for mode in ("exact", "fast"):
        monkeypatch.setattr(hstage, "PROGRESS_INTERVAL", 0.0)
        seen = []
        out = hm.emulate(a, np.zeros(1, "float32"), mode=mode, progress=seen.append)
        np.testing.assert_array_equal(out, want)
        assert seen == sorted(seen) and seen[-1] == pytest.approx(1.0)
        # Within the first iteration of a and b (a quarter of the run), every iteration of c and d.
        assert len({x for x in seen if x <= 0.25}) >= 4 * 8, seen
        # Rate-limited (the loops below the first inner one): fewer calls, still ending at 1.
        monkeypatch.setattr(hstage, "PROGRESS_INTERVAL", 3600.0)
        limited = []
        hm.emulate(a, np.zeros(1, "float32"), mode=mode, progress=limited.append)
        assert len(limited) < len(seen) and limited[-1] == pytest.approx(1.0)


def test_thread_extent_on_a_variable_without_a_thread_tag_is_refused_not_a_crash():
    # TVM's own test of MergeSharedMemoryAllocations (harvested by `zoo --tvm-tests`): in 0.27,
    # T.env_thread gives a plain Var, so the thread_extent attribute has no thread tag.  TVM cannot
    # lower it; the emulator refuses it by name instead of failing on the missing tag.
    @T.prim_func(s_tir=True, check_well_formed=False)
    def f(X: T.Buffer((128,), "float32")):
        tx = T.env_thread("threadIdx.x")
        with T.attr(tx, "thread_extent", 128):
            X[tx] = X[tx] + T.float32(1)

    hm = thn.build(f, on_failure="keep")
    assert hm.failure is not None  # TVM's own lowering fails too
    assert not hm.stages[0].emulatable
    assert "thread_extent attribute" in hm.stages[0].reason and "without a thread tag" in hm.stages[0].reason


def test_an_inner_loop_bounded_by_an_outer_variable_runs_per_lane():
    # MetaSchedule's DynamicLoop test (harvested by `zoo --tvm-tests`): `for k in range(i)` inside
    # `for i, j`.  i's lanes give k different bounds: each lane counts its own k, the loop running
    # while any lane has trips left (i ran serially; before that, j too: over a minute at 1024).
    # Every lane starts at 0, so the looping lanes are all at one k (a number, not an array of the
    # lanes' copies), and CommonSubexprElim's `cse_v1 = i * 16` is computed once, before the trips;
    # `for k in range(i, 16)` starts per lane: each lane counts its own k.
    @T.prim_func(s_tir=True)
    def f(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32"),
          D: T.Buffer((16, 16), "float32")):
        for i, j in T.grid(16, 16):
            for k in T.serial(0, i):
                with T.sblock("matmul"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    with T.init():
                        C[vi, vj] = T.float32(0)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
        for i, j in T.grid(16, 16):
            for k in T.serial(i, 16):
                with T.sblock("upper"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    with T.init():
                        D[vi, vj] = T.float32(0)
                    D[vi, vj] = D[vi, vj] + A[vi, vk] * B[vk, vj]

    a, b = _rand(16, 16), _rand(16, 16, seed=1)
    zeros = np.zeros((16, 16), "float32")
    hm = check_every_stage(f, [a, b, zeros, zeros.copy()])
    plan = hm.explain(0)
    assert "i: lanes" in plan and "j: lanes" in plan, plan
    got = [a, b, zeros.copy(), zeros.copy()]
    hm.emulate(*got, mode="fast")
    np.testing.assert_allclose(got[2], np.tril(a, -1) @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[3], np.triu(a) @ b, rtol=1e-5, atol=1e-5)
    cse = next(s for s in hm.stages if s.changed and s.label.endswith("CommonSubexprElim"))
    src = cse.fast_source()
    before_trips = src.split("while")[0]
    assert re.search(r"^ *k = 0$", before_trips, re.M), src
    assert re.search(r"^ *cse_v\d+ = i \* 16$", before_trips, re.M), src
    # Before the loops are normalised (stage 0), the second triangle's k starts at i: one per lane.
    assert re.search(r"^ *k_1 = i_1 \+ np.zeros_like\(k_1_end\)$", hm.stages[0].fast_source(), re.M)


@T.prim_func(s_tir=True)
def _sparse_row_sums(indptr: T.Buffer((9,), "int32"), vals: T.Buffer((40,), "float32"), y: T.Buffer((8,), "float32")):
    for i in range(8):
        y[i] = T.float32(0)
        for k in range(indptr[i], indptr[i + 1]):
            y[i] = y[i] + vals[k]


def test_an_inner_loop_bounded_by_values_read_from_memory_keeps_its_iterations_serial():
    # A sparse row's length comes from memory: as lanes, the longest row would set the pace of all
    # (256 rows, one of 4,097 values: 29 times slower than the serial run), so i stays serial.
    counts = np.array([1, 0, 30, 2, 1, 3, 2, 1], "int32")
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype("int32")
    hm = check_every_stage(_sparse_row_sums, [indptr, _rand(40), np.zeros(8, "float32")])
    assert "i: serial (no lane form: loop bounds read from memory" in hm.explain(0), hm.explain(0)


# Privatisation: an allocation outside a loop that every iteration writes before it reads (what
# StorageRewrite makes of TVM's test_tir_schedule_cache_read_write `reduce`: B[0] reused by every
# (i, j)) gets a copy per lane; a value that flows between iterations keeps the loop serial.
@T.prim_func
def scratch_written_first(A: T.Buffer((16, 8, 4), "float32"), C: T.Buffer((16, 8), "float32")):
    B = T.alloc_buffer((2,), "float32")
    for i, j in T.grid(16, 8):
        for l in range(4):
            if l == 0:
                B[0] = T.float32(0)
                B[1] = T.float32(1)
            B[0] = B[0] + A[i, j, l]
            B[1] = B[1] * A[i, j, l]
        C[i, j] = B[0] + B[1]


@T.prim_func
def scratch_read_before_written(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    # Iteration i reads what iteration i - 1 wrote.
    B = T.alloc_buffer((1,), "float32")
    for i in range(16):
        if i > 0:
            C[i] = B[0] * T.float32(2)
        B[0] = A[i]


@T.prim_func
def scratch_read_after_the_loop(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    # Written before read in every iteration, but the last iteration's value is read after the loop.
    B = T.alloc_buffer((1,), "float32")
    for i in range(16):
        B[0] = A[i] + T.float32(1)
        C[i] = B[0]
    C[0] = B[0]


@T.prim_func
def scratch_written_on_some_iterations(A: T.Buffer((16, 4), "float32"), C: T.Buffer((16,), "float32")):
    # Odd iterations of i go on from the sum the iteration before left in B.
    B = T.alloc_buffer((1,), "float32")
    for i in range(16):
        for l in range(4):
            if l == 0 and i % 2 == 0:
                B[0] = T.float32(0)
            B[0] = B[0] + A[i, l]
        C[i] = B[0]


def test_an_allocation_each_iteration_writes_before_reading_gets_a_copy_per_lane_and_is_exact():
    hm = check_every_stage(scratch_written_first, [_rand(16, 8, 4), np.zeros((16, 8), "float32")])
    assert "alloc((16, 8, 2), 'float32')" in hm.stage(0).fast_source()
    # The cache_read_write `reduce` kernel once StorageRewrite reuses one B[0] for every (i, j).
    hm = check_every_stage(whole_buffer_in_the_innermost_block,
                           [_rand(32, 16, 8, 4), np.zeros((32, 16), "float32")], min_stages=5)
    assert "alloc((32, 16, 1), 'float32')" in hm.stage("StorageRewrite").fast_source()


@T.prim_func
def padded_tiles_read_with_an_outer_channel(A: T.Buffer((40,), "float32"), C: T.Buffer((2, 8, 4), "float32")):
    # The corpus's conv3d space c3d_1, small: each (o, i) pads its window P[4i, 4i + 6) by index
    # (windows overlap), then reads it at an index whose `(o * 16 + j) // 64` is 0 only because the
    # outer o < 2: with o's range known, i's iterations are lanes on one copy of P (they were
    # serial, 73 s a stage for the conv3d).
    P = T.alloc_buffer((40,), "float32")
    for o in range(2):
        for i in range(8):
            for t in range(6):
                P[i * 4 + t] = T.if_then_else(i * 4 + t < 36, A[i * 4 + t], T.float32(0))
            for j in range(4):
                C[o, i, j] = P[i * 4 + j + (o * 16 + j) // 64] + P[i * 4 + j + 2] * T.float32(o + 1)


def test_padded_tiles_whose_reads_need_the_outer_loops_bounds_run_as_lanes_on_one_copy():
    a = _rand(40)
    hm = check_every_stage(padded_tiles_read_with_an_outer_channel, [a, np.zeros((2, 8, 4), "float32")])
    padded = np.where(np.arange(40) < 36, a, 0).astype("float32")
    window = np.arange(8)[:, None] * 4 + np.arange(4)
    want = np.stack([padded[window] + padded[window + 2] * np.float32(o + 1) for o in range(2)])
    got = hm.emulate(a, np.zeros((2, 8, 4), "float32"), mode="fast")
    np.testing.assert_array_equal(got, want)
    assert "i: lanes (iterations independent once each writes the elements of P" in hm.explain(0), hm.explain(0)


@pytest.mark.parametrize("func, args", [
    (scratch_read_before_written, lambda: [_rand(16), np.zeros(16, "float32")]),
    (scratch_read_after_the_loop, lambda: [_rand(16), np.zeros(16, "float32")]),
    (scratch_written_on_some_iterations, lambda: [_rand(16, 4), np.zeros(16, "float32")]),
])
def test_an_allocation_whose_value_flows_between_iterations_keeps_them_serial_and_exact(func, args):
    check_every_stage(func, args())


@T.prim_func(s_tir=True)
def predicated_split_past_the_end(a: T.handle, b: T.handle) -> None:
    # TVM's test_tir_schedule_split_fuse `elementwise_split_with_predicate`, smaller: i0 runs to 50
    # but only i0 < 2 passes the predicate (there i0 < 1000 for 22 values): the lanes of i0 cover
    # only those, at every stage, whatever form the predicate takes (`(i0 * 2 + i1) * 3 + i2 < 12`,
    # `i0 < 2`, `i0 // 2 < 1`).
    B = T.match_buffer(b, [12, 16, 16])
    A = T.match_buffer(a, [12, 16, 16])
    for i0, i1, i2, j0, j1, k0, k1 in T.grid(50, 2, 3, 1, 17, 3, 6):
        with T.sblock("B"):
            vi = T.axis.S(12, i0 * 6 + i1 * 3 + i2)
            vj = T.axis.S(16, j0 * 17 + j1)
            vk = T.axis.S(16, k0 * 6 + k1)
            T.where((i0 * 2 + i1) * 3 + i2 < 12 and j0 * 17 + j1 < 16 and k0 * 6 + k1 < 16)
            B[vi, vj, vk] = A[vi, vj, vk] * T.float32(2.0)


@T.prim_func
def guard_with_a_gap(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    # The guard holds at both ends of i (0 and 60..63) and fails between: no cut (what a cut
    # keeps must include every value where the guard may hold); j0 and m0 are cut.
    for i in range(64):
        if i < 1 or i >= 60:
            B[i] = A[i] * T.float32(3)
    for j0, j1 in T.grid(20, 4):
        if j0 * 4 + j1 >= 40 and j0 * 4 + j1 < 64:
            B[j0 * 4 + j1 - 40] = B[j0 * 4 + j1 - 40] + A[j0 * 4 + j1]
    for m0, m1 in T.grid(30, 4):
        # A binding before the guard (CommonSubexprElim's), the guard through it.
        m: T.let[T.int32] = m0 * 4 + m1
        if m < 32:
            B[m + 32] = B[m + 32] * A[m]


def test_a_lanes_loop_runs_only_over_the_values_its_guard_can_pass_and_is_exact():
    hm = check_every_stage(predicated_split_past_the_end, [_rand(12, 16, 16), np.zeros((12, 16, 16), "float32")],
                           min_stages=8)
    assert "np.arange(0, 2, dtype='int32')" in hm.stage(0).fast_source()
    assert "np.arange(0, 2, dtype='int32')" in hm.stage("RenormalizeSplitPattern").fast_source()
    hm = check_every_stage(guard_with_a_gap, [_rand(64), _rand(64, seed=1)])
    source = hm.stage(0).fast_source()
    assert "np.arange(0, 64, dtype='int32')" in source and "np.arange(10, 16, dtype='int32')" in source
    assert "np.arange(0, 8, dtype='int32')" in source


@T.prim_func(s_tir=True)
def reduce_through_a_shared_cache(A: T.Buffer((32, 16, 8, 4), "float32"), C: T.Buffer((32, 16), "float32")):
    # TVM's test_tir_schedule_cache_read_write `reduce_reindex_cache_write_0` (there 128**4): in a
    # function without threads "shared" memory is plain memory, each (i, j) touching its own
    # elements of B_shared (one copy for all lanes), and after StorageRewrite its one element,
    # written before read in every (i, j) (a copy per lane).
    B = T.sblock_alloc_buffer((32, 16, 8))
    B_shared = T.sblock_alloc_buffer((16, 32, 8), scope="shared")
    for i, j, k in T.grid(32, 16, 8):
        for l in range(4):
            with T.sblock("B"):
                vi, vj, vk, vl = T.axis.remap("SSSR", [i, j, k, l])
                T.reads(A[vi, vj, vk, vl])
                T.writes(B_shared[vj, vi, vk])
                with T.init():
                    B_shared[vj, vi, vk] = T.float32(0)
                B_shared[vj, vi, vk] = B_shared[vj, vi, vk] + A[vi, vj, vk, vl]
        with T.sblock("B_shared"):
            vi, vj, vk = T.axis.remap("SSS", [i, j, k])
            T.reads(B_shared[vj, vi, vk])
            T.writes(B[vi, vj, vk])
            B[vi, vj, vk] = B_shared[vj, vi, vk]
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(B[vi, vj, vk])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + B[vi, vj, vk]


def test_shared_memory_of_a_function_without_threads_is_one_copy_or_a_copy_per_lane_and_exact():
    hm = check_every_stage(reduce_through_a_shared_cache, [_rand(32, 16, 8, 4), np.zeros((32, 16), "float32")],
                           min_stages=5)
    assert "B_shared = alloc((16, 32, 8), 'float32')" in hm.stage("PlanAndUpdateBufferAllocationLocation").fast_source()


@T.prim_func(s_tir=True)
def tiles_through_a_cache_under_a_loop_of_one(A: T.Buffer((64, 4), "float32"), B: T.Buffer((64,), "float32")):
    # TVM's MetaSchedule CPU spaces (test_cpu_c3d `c3d_0`), smaller: the reduction writes C at
    # w_0 * 64 + w_1 * 8 + w_3, the copy reads it at w_1 * 8 + ax; w_0 takes one value (0), so
    # each iteration of w_1 touches its own 8 elements of C.
    C = T.sblock_alloc_buffer((64,))
    for w_0, w_1 in T.grid(1, 8):
        for w_3, k in T.grid(8, 4):
            with T.sblock("C"):
                vw = T.axis.spatial(64, w_0 * 64 + w_1 * 8 + w_3)
                vk = T.axis.reduce(4, k)
                with T.init():
                    C[vw] = T.float32(0)
                C[vw] = C[vw] + A[vw, vk]
        for ax in range(8):
            with T.sblock("B"):
                v = T.axis.spatial(64, w_1 * 8 + ax)
                B[v] = C[v]


@T.prim_func(s_tir=True)
def tiles_with_loops_of_one_in_the_index(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
    # A MetaSchedule tiling's loops of one iteration (d_2, h_2, ...) lie inside the lanes loops and
    # appear in the block's index with large coefficients; only i and j run as lanes.
    for i, a0, a1, a2, a3, a4, a5, j in T.grid(4, 1, 1, 1, 1, 1, 1, 8):
        with T.sblock("B"):
            vi = T.axis.spatial(4, a0 * 4 + a1 * 4 + a2 * 4 + a3 * 4 + a4 * 4 + a5 * 4 + i)
            vj = T.axis.spatial(8, j)
            B[vi, vj] = A[vi, vj] * T.float32(2)


def test_tiles_under_a_loop_of_one_run_as_lanes_and_are_exact():
    check_every_stage(tiles_through_a_cache_under_a_loop_of_one, [_rand(64, 4), np.zeros(64, "float32")],
                      min_stages=5)


def test_loops_of_one_in_the_index_leave_the_lanes_in_memory_order_and_exact():
    check_every_stage(tiles_with_loops_of_one_in_the_index, [_rand(4, 8), np.zeros((4, 8), "float32")])


@T.prim_func(s_tir=True)
def _dynamic_strided_slice(a: T.handle, b: T.handle):
    # relax's strided_slice(x, begin=[1], end=[100], strides=[2]) of a symbolic length: the output's
    # length is (min(100, n) + 1 - min(1, n)) // 2.
    n = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, ((T.min(T.int64(100), n) + T.int64(1) - T.min(T.int64(1), n)) // T.int64(2),), "float32")
    for i in range((T.min(T.int64(100), n) + T.int64(1) - T.min(T.int64(1), n)) // T.int64(2)):
        with T.sblock("slice"):
            vi = T.axis.spatial((T.min(T.int64(100), n) + T.int64(1) - T.min(T.int64(1), n)) // T.int64(2), i)
            B[vi] = A[vi * T.int64(2) + T.int64(1)]


@pytest.mark.parametrize("n", [7, 8, 1])
def test_a_parameter_whose_length_is_a_min_of_sizes(n):
    a = np.arange(n, dtype="float32")
    hm = check_every_stage(_dynamic_strided_slice, [a, np.zeros(n // 2, "float32")])
    assert hm.params[1].shape == ("(min(100, n) + 1 - min(1, n)) // 2",)
    with pytest.raises(ArgumentShapeError):
        hm.emulate(a, np.zeros(n // 2 + 1, "float32"))


@T.prim_func(s_tir=True)
def _pairs_ceil_mode(var_x: T.handle, var_y: T.handle):
    # R.nn.avg_pool1d(x, 2, 2, ceil_mode=True) over a symbolic length: the output's length is a conditional.
    n = T.int64()
    x = T.match_buffer(var_x, (n,), "float32")
    y = T.match_buffer(var_y, (T.if_then_else(n % T.int64(2) == T.int64(0), n // T.int64(2),
                                               n // T.int64(2) + T.int64(1)),), "float32")
    for i in range((n + T.int64(1)) // T.int64(2)):
        with T.sblock("y"):
            vi = T.axis.spatial((n + T.int64(1)) // T.int64(2), i)
            y[vi] = x[vi * T.int64(2)] + T.if_then_else(vi * T.int64(2) + T.int64(1) < n,
                                                         x[vi * T.int64(2) + T.int64(1)], T.float32(0))


@pytest.mark.parametrize("n", [5, 6, 1])
def test_a_parameter_whose_length_is_a_conditional_of_sizes(n):
    x = _rand(n)
    want = np.concatenate([x, np.zeros(n % 2, "float32")]).reshape(-1, 2).sum(axis=1)
    hm = check_every_stage(_pairs_ceil_mode, [x, np.zeros((n + 1) // 2, "float32")],
                           reference=lambda args: [args[0], want])
    assert hm.params[1].shape == ("n // 2 if n % 2 == 0 else n // 2 + 1",)
    with pytest.raises(ArgumentShapeError):
        hm.emulate(x, np.zeros((n + 1) // 2 + 1, "float32"))


@T.prim_func
def large_allocation_in_a_serial_loop(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    B[0] = A[0]
    for i in range(1, 64):  # serial: each iteration reads the previous one's B
        tmp = T.alloc_buffer((1 << 23,), "float32")  # 32 MiB, written before it is read
        tmp[i * 1000] = A[i] * T.float32(2)
        B[i] = B[i - 1] + tmp[i * 1000]


def test_fast_mode_makes_a_large_allocation_in_a_serial_loop_once():
    # dlight's per-thread accumulators, before CompactBufferAllocation shrinks them, are moved into
    # the block loop: 1,000 blocks each touching pages of a fresh 512 MiB buffer took 6 minutes.
    a = _rand(64)
    want = np.cumsum(np.concatenate([a[:1], a[1:] * np.float32(2)]), dtype=np.float32)
    hm = check_every_stage(large_allocation_in_a_serial_loop, [a, np.zeros(64, "float32")],
                           reference=lambda args: [args[0], want])
    source = hm.stage(0).fast_source()
    assert source.index("alloc((8388608,)") < source.index("for i in range")
    assert hm.get_source(0).index("alloc((8388608,)") > hm.get_source(0).index("for i in range")  # exact: as written
    out = np.zeros(64, "float32")  # the sanitizers keep a fresh allocation per iteration (its written-marks)
    hm.emulate(a, out, mode="fast", check=True)
    np.testing.assert_array_equal(out, want)
