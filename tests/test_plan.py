"""The emulation plan: fast mode decides each loop's strategy before emitting, and says why."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from tvm import te
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import ui
from tvm_hybrid_nb.codegen import cost as C
from tvm_hybrid_nb.codegen import plan as P
from tvm_hybrid_nb.errors import EmulationError

from test_gpu import _with_barrier as _gpu_reverse_in_blocks  # blocks reversing through shared memory


def _rand(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype("float32")


def _matmul(n=32):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return thn.build([A, B, C])


def test_matmul_plan_runs_i_and_j_as_lanes_and_names_the_carried_dependence_of_k():
    hm = _matmul()
    plan = hm.stage(0).plan("fast")
    by_loop = {d.loop: d for d in plan.decisions}
    assert by_loop["i"].strategy == P.LANES and by_loop["j"].strategy == P.LANES
    assert by_loop["k"].strategy == P.SERIAL
    assert "carried dependence on C" in by_loop["k"].reason
    assert "k stays serial: carried dependence on C" in plan.summary()
    # The plan is what ran: the fast script computes the matmul exactly as the exact one.
    a, b = _rand(32, 32), _rand(32, 32)
    fast = hm.emulate(a, b, np.zeros((32, 32), "float32"), mode="fast").copy()
    exact = hm.emulate(a, b, np.zeros((32, 32), "float32"), mode="exact").copy()
    np.testing.assert_array_equal(fast, exact)
    np.testing.assert_allclose(fast, a @ b, rtol=1e-4, atol=1e-4)


def test_exact_mode_plans_every_loop_serial_and_explain_is_text_and_data():
    hm = _matmul(8)
    text = hm.explain(0, mode="exact")
    assert text.startswith("exact mode") and text.count("serial (exact mode") == 3
    data = hm.stage(0).plan("fast").as_dict()
    assert json.loads(json.dumps(data)) == data
    assert [d["loop"] for d in data["loops"]] == ["i", "j", "k"]
    with pytest.raises(ValueError, match="mode"):
        hm.stage(0).plan("quick")


def test_a_loop_emission_cannot_run_as_lanes_is_planned_serial_with_the_reason():
    from test_constructs import large_allocation_per_iteration  # a copy of tmp per lane: 8 GiB

    hm = thn.build(large_allocation_per_iteration)
    (decision,) = hm.stage(0).plan("fast").decisions
    assert decision.strategy == P.SERIAL
    assert decision.reason.startswith("no lane form: one copy of tmp per lane would need")
    a = _rand(2048)
    out = hm.emulate(a, np.zeros(2048, "float32"), mode="fast")
    np.testing.assert_array_equal(out, a * np.float32(2) + np.float32(1))


def test_an_allocation_inside_lanes_is_planned_as_one_copy_for_the_lanes_that_touch_it_apart():
    from test_constructs import buffer_shared_by_some_lanes, whole_buffer_in_the_innermost_block

    plan = thn.build(whole_buffer_in_the_innermost_block).stage("PlanAndUpdateBufferAllocationLocation").plan("fast")
    (alloc,) = plan.allocations
    assert (alloc.buffer, alloc.loops) == ("B", ("i", "j"))
    assert alloc.reason == "each iteration of i, j touches its own elements of B"
    assert "B: one copy for the lanes of i, j" in plan.text() and "B allocated once for all lanes" in plan.summary()
    assert plan.as_dict()["allocations"][0]["loops"] == ["i", "j"]
    by_loop = {d.loop: d.strategy for d in plan.decisions}
    assert by_loop["i"] == by_loop["j"] == P.LANES and by_loop["k"] == P.SERIAL
    # Indexed by vi only: the lanes of j write the same elements, so each j lane keeps a copy.
    plan = thn.build(buffer_shared_by_some_lanes).stage(0).plan("fast")
    (alloc,) = plan.allocations
    assert (alloc.buffer, alloc.loops) == ("tmp", ("i",))
    # An allocation every lane uses the same element of is never shared (see the next test).
    from test_constructs import large_allocation_per_iteration
    assert not thn.build(large_allocation_per_iteration).stage(0).plan("fast").allocations


def test_a_predicate_bounds_the_index_in_the_dependence_test():
    from test_constructs import predicated_overlap, predicated_split

    hm = thn.build(predicated_split)
    for stage in ("FlattenBuffer", "RenormalizeSplitPattern", "AnnotateEntryFunc"):
        plan = hm.stage(stage).plan("fast")
        assert all(d.strategy == P.LANES for d in plan.decisions), (stage, plan.text())
    plan = thn.build(predicated_overlap).stage(0).plan("fast")
    by_loop = {d.loop: d for d in plan.decisions}
    assert by_loop["j"].strategy == P.SERIAL
    assert by_loop["j"].reason == "carried dependence on B: two iterations of j may touch the same element"


def test_parallel_loop_is_planned_in_chunks_and_a_too_small_loop_stays_serial():
    @T.prim_func
    def f(A: T.Buffer((64, 4), "float32"), B: T.Buffer((64, 4), "float32")):
        for i in T.parallel(64):
            for j in range(4):
                B[i, j] = A[i, j] + T.float32(1)
        for u in range(1):
            B[0, 0] = B[0, 0] * T.float32(2)

    hm = thn.build(f)
    by_loop = {d.loop: d for d in hm.stage(0).plan("fast").decisions}
    assert by_loop["i"].strategy == P.PARALLEL_CHUNKS and by_loop["j"].strategy == P.LANES
    assert by_loop["u"].strategy == P.SERIAL and "one iteration" in by_loop["u"].reason
    a = _rand(64, 4)
    want = a + np.float32(1)
    want[0, 0] *= np.float32(2)
    np.testing.assert_array_equal(hm.emulate(a, np.zeros((64, 4), "float32"), mode="fast"), want)


def _gpu_build(compute, n=256, threads=64):
    A = te.placeholder((n,), name="A")
    B = compute(A)
    sch = tvm.s_tir.Schedule(te.create_prim_func([A, B]))
    loops = sch.get_loops(sch.get_sblock("B"))
    bx, tx = sch.split(loops[-1] if len(loops) == 1 else loops[0], [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return thn.build(sch, target="cuda")


def _after_split(hm):
    """The first stage after the host/device split: the host function launches the kernel."""
    return next(s for s in hm.stages if s.emulatable and s.changed and s.plan("fast").launched)


def test_gpu_blocks_run_as_lanes_in_chunks_at_every_stage_when_independent():
    hm = _gpu_build(lambda A: te.compute(A.shape, lambda i: A[i] * 2.0, name="B"))
    strategies = {d.loop: d.strategy for d in hm.stage(0).plan("fast").decisions}
    assert strategies == {"i_0": P.PARALLEL_CHUNKS, "i_1": P.THREAD_LANES}
    later = _after_split(hm)
    plan = later.plan("fast")
    (kernel,) = plan.launched.values()
    assert [(d.loop, d.strategy) for d in kernel.decisions] == [("blockIdx.x", P.PARALLEL_CHUNKS),
                                                                 ("threadIdx.x", P.THREAD_LANES)]
    assert "kernel " in plan.text() and "blocks independent" in plan.text()
    a = _rand(256)
    for stage in (0, later.index):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros(256, "float32"), stage=stage, mode="fast"),
                                      a * np.float32(2))


def test_gpu_blocks_that_communicate_through_global_memory_run_one_after_another():
    @T.prim_func
    def f(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                B[tx] = B[tx] + A[bx * 64 + tx]  # every block adds into the same B: they race on a GPU

    hm = thn.build(f, target="cuda")
    (block,) = [d for d in hm.stage(0).plan("fast").decisions if d.loop == "bx"]
    assert block.strategy == P.SERIAL and "carried dependence on B" in block.reason
    later = _after_split(hm)
    (kernel,) = later.plan("fast").launched.values()
    assert kernel.decisions[0].strategy == P.BLOCK_LOOP and "carried dependence on B" in kernel.decisions[0].reason
    assert "run one after another" in later.plan("fast").summary()
    a = _rand(256)
    want = np.zeros(64, "float32")
    for bx in range(4):
        want += a[bx * 64:(bx + 1) * 64]
    for stage in (0, later.index):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros(64, "float32"), stage=stage, mode="fast"), want)


def test_the_explorer_shows_the_plan_next_to_the_hybrid_source():
    hm = _matmul(8)
    panel = ui.stage_panel(hm.stage(0), hm.stages, run_compare=None)
    html = panel.content.value
    assert 'class="thn-plan"' in html
    assert "k stays serial: carried dependence on C" in html
    assert html.startswith("<details class=\"thn-plan\"")  # above the source


def test_blocks_with_shared_tiles_each_get_their_own_shared_memory_and_match_exact():
    from tvm_hybrid_nb import examples

    ex = examples.gpu_tiled_matmul(64, 16)
    hm = thn.build(ex.obj, target="cuda")
    inputs = ex.inputs(hm)
    out = [k for k, p in enumerate(hm.params) if p.is_output][0]
    stages = [hm.stage(0), _after_split(hm)]
    plans = [s.plan("fast") for s in stages]
    blocks = [d for p in plans for d in p.all_decisions() if "blockIdx" in d.loop or d.loop in ("i_0", "j_0")]
    assert blocks and all(d.strategy in (P.LANES, P.PARALLEL_CHUNKS) for d in blocks), [p.text() for p in plans]
    for stage in stages:
        fast, exact = [a.copy() for a in inputs], [a.copy() for a in inputs]
        hm.emulate(*fast, stage=stage.index, mode="fast")
        hm.emulate(*exact, stage=stage.index, mode="exact")
        np.testing.assert_array_equal(fast[out], exact[out])
        np.testing.assert_allclose(fast[out], inputs[0] @ inputs[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("chunk_lanes", ["64", "1000", "2097152"])
def test_grid_chunks_report_progress_and_never_change_the_result(monkeypatch, chunk_lanes):
    monkeypatch.setenv("TVM_HYBRID_NB_MAX_CHUNK_LANES", chunk_lanes)
    monkeypatch.setenv("TVM_HYBRID_NB_CHUNK_LANES", "1")
    if chunk_lanes == "64":  # one thread: its report after every chunk is deterministic
        monkeypatch.setenv("TVM_HYBRID_NB_THREADS", "1")
    hm = _gpu_build(lambda A: te.compute(A.shape, lambda i: te.exp(A[i]) * 2.0, name="B"), n=1024)
    a = _rand(1024)
    exact = hm.emulate(a, np.zeros(1024, "float32"), mode="exact").copy()
    for stage in (0, _after_split(hm).index):
        seen = []
        fast = hm.emulate(a, np.zeros(1024, "float32"), stage=stage, mode="fast", progress=seen.append)
        np.testing.assert_array_equal(fast, exact)
        assert seen and seen == sorted(seen) and seen[-1] == pytest.approx(1.0)
        if chunk_lanes == "64":  # 16 blocks of 64 threads, one block a chunk: a report per chunk
            assert len(seen) == 16, seen


def test_only_memory_the_blocks_would_share_and_write_differently_gets_a_copy_per_block():
    from tvm_hybrid_nb import examples

    ex = examples.gpu_tiled_matmul(64, 8)
    sch = ex.obj
    block = sch.get_sblock("C")
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, sch.get_loops(block)[3])  # each thread's sum in C_local
    hm = thn.build(sch, target="cuda")
    by_loop = {d.loop: d for d in hm.stage(0).plan("fast").decisions}
    # Blocks of one row share A's tile row, blocks of one column B's; C_local they touch apart.
    # At stage 0 the tiles are whole (64, 64) buffers that every block of a row (column) loads
    # alike, in lockstep: one copy serves them.
    assert by_loop["i_0"].strategy == P.PARALLEL_CHUNKS and by_loop["i_0"].copies == ("B_shared",)
    assert by_loop["j_0"].strategy == P.LANES and by_loop["j_0"].copies == ("A_shared",)
    assert by_loop["i_0"].alike_names == ("B_shared",) and by_loop["j_0"].alike_names == ("A_shared",)
    assert "one copy of A_shared for all the blocks (each writes it alike)" in hm.explain(0)
    # Once StorageRewrite hoists the compacted (64,) tiles out of blockIdx.x, every block of a row
    # writes the same indices of B_shared with its own values: each gets its own copy; A_shared
    # they still write alike.
    rewritten = next(s for s in hm.stages if s.label.endswith("StorageRewrite"))
    (bx,) = [d for d in rewritten.plan("fast").all_decisions() if d.loop == "blockIdx.x"]
    assert "B_shared" in bx.copies and bx.alike_names == ("A_shared",), bx
    inputs = ex.inputs(hm)
    for stage in (0, rewritten.index, _after_split(hm).index):
        fast, exact = [a.copy() for a in inputs], [a.copy() for a in inputs]
        hm.emulate(*fast, stage=stage, mode="fast")
        hm.emulate(*exact, stage=stage, mode="exact")
        np.testing.assert_array_equal(fast[2], exact[2])
        np.testing.assert_allclose(fast[2], inputs[0] @ inputs[1], rtol=1e-4, atol=1e-4)


def test_shared_memory_blocks_write_alike_only_when_nothing_written_depends_on_the_block():
    @T.prim_func(s_tir=True)
    def f(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        own = T.sblock_alloc_buffer((8,), scope="shared")      # index alike, value per block
        twice = T.sblock_alloc_buffer((8,), scope="shared")    # reads own: differs too
        same = T.sblock_alloc_buffer((8,), scope="shared")     # every block loads the same
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            with T.sblock("blk"):
                T.reads(A[0:64])
                T.writes(B[bx * 8:bx * 8 + 8])
                for tx in T.thread_binding(8, thread="threadIdx.x"):
                    own[tx] = A[bx * 8 + tx]
                    same[tx] = A[tx]
                for tx in T.thread_binding(8, thread="threadIdx.x"):
                    twice[tx] = own[tx] * T.float32(2)
                for tx in T.thread_binding(8, thread="threadIdx.x"):
                    B[bx * 8 + tx] = twice[tx] + same[7 - tx]

    hm = thn.build(f, target="cuda")
    (blocks,) = [d for d in hm.stage(0).plan("fast").decisions if d.loop == "bx"]
    assert blocks.strategy in (P.LANES, P.PARALLEL_CHUNKS)
    assert set(blocks.copies) == {"own", "twice", "same"} and blocks.alike_names == ("same",)
    # The sanitizers keep every copy (their records are per block).
    (checked,) = [d for d in hm.stage(0).plan("fast", check=True).decisions if d.loop == "bx"]
    assert checked.alike_names == ()
    a = _rand(64)
    want = a * np.float32(2) + np.tile(a[:8][::-1], 8)
    for stage in (0, _after_split(hm).index):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros(64, "float32"), stage=stage, mode="fast"), want)
    np.testing.assert_array_equal(hm.emulate(a, np.zeros(64, "float32"), mode="fast", check=True), want)


def test_a_tile_allocated_inside_each_block_is_one_copy_for_blocks_that_touch_it_apart_or_write_it_alike():
    from tvm_hybrid_nb import examples

    ex = examples.gpu_tiled_matmul(64, 8)
    hm = thn.build(ex.obj, target="cuda")
    # PlanAndUpdateBufferAllocationLocation moves the whole (64, 64) tiles into every block.
    moved = next(s for s in hm.stages if s.label.endswith("PlanAndUpdateBufferAllocationLocation"))
    by_buffer = {a.buffer: a for a in moved.plan("fast").allocations}
    assert by_buffer["A_shared"].loops == ("i_0", "j_0")
    assert "the blocks of i_0 touch their own elements of A_shared" in by_buffer["A_shared"].reason
    assert "every block of j_0 writes A_shared alike" in by_buffer["A_shared"].reason
    assert "A_shared: one copy for the lanes of i_0, j_0" in moved.plan("fast").text()
    # Under the sanitizers only the blocks that touch a tile apart share it.
    checked = {a.buffer: a for a in moved.plan("fast", check=True).allocations}
    assert checked["A_shared"].loops == ("i_0",) and checked["B_shared"].loops == ("j_0",)
    inputs = ex.inputs(hm)
    out = [k for k, p in enumerate(hm.params) if p.is_output][0]
    exact = [a.copy() for a in inputs]
    hm.emulate(*exact, stage=moved.index, mode="exact")
    np.testing.assert_allclose(exact[out], inputs[0] @ inputs[1], rtol=1e-4, atol=1e-4)
    for check in (False, True):
        fast = [a.copy() for a in inputs]
        hm.emulate(*fast, stage=moved.index, mode="fast", check=check)
        np.testing.assert_array_equal(fast[out], exact[out])


def test_blocks_that_write_a_tile_of_their_own_differently_keep_a_copy_each():
    @T.prim_func(s_tir=True)
    def f(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            with T.sblock("blk"):
                T.reads(A[0:64])
                T.writes(B[bx * 8:bx * 8 + 8])
                own = T.sblock_alloc_buffer((8,), scope="shared")      # index alike, value per block
                same = T.sblock_alloc_buffer((8,), scope="shared")     # every block loads the same
                for tx in T.thread_binding(8, thread="threadIdx.x"):
                    own[tx] = A[bx * 8 + tx]
                    same[tx] = A[tx]
                for tx in T.thread_binding(8, thread="threadIdx.x"):
                    B[bx * 8 + tx] = own[tx] * T.float32(2) + same[7 - tx]

    hm = thn.build(f, target="cuda")
    assert [(a.buffer, a.loops) for a in hm.stage(0).plan("fast").allocations] == [("same", ("bx",))]
    a = _rand(64)
    want = a * np.float32(2) + np.tile(a[:8][::-1], 8)
    for stage in (0, _after_split(hm).index):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros(64, "float32"), stage=stage, mode="fast"), want)


def test_an_allocation_written_before_read_in_every_iteration_is_privatised_with_the_reason():
    from test_constructs import (scratch_read_after_the_loop, scratch_read_before_written, scratch_written_first,
                                 scratch_written_on_some_iterations, whole_buffer_in_the_innermost_block)

    plan = thn.build(scratch_written_first).stage(0).plan("fast")
    by_loop = {d.loop: d for d in plan.decisions}
    for loop in ("i", "j"):
        assert by_loop[loop].strategy == P.LANES
        assert by_loop[loop].reason == ("iterations independent once each writes B before reading it: "
                                        "all of them run at once as array lanes")
        assert by_loop[loop].copies == ("B",)
        assert "a copy of B per lane" in by_loop[loop].text()
    # l carries B's sum from one iteration to the next.
    assert by_loop["l"].strategy == P.SERIAL
    plan = thn.build(whole_buffer_in_the_innermost_block).stage("StorageRewrite").plan("fast")
    by_loop = {d.loop: d for d in plan.decisions}
    assert by_loop["i"].strategy == by_loop["j"].strategy == P.LANES and by_loop["i"].copies == ("B",)
    assert by_loop["k"].strategy == P.SERIAL  # k also sums into C
    for func in (scratch_read_before_written, scratch_read_after_the_loop, scratch_written_on_some_iterations):
        (decision, *_) = thn.build(func).stage(0).plan("fast").decisions
        assert decision.loop == "i" and decision.strategy == P.SERIAL, func
        assert decision.reason == "carried dependence on B: two iterations of i may touch the same element"
        assert not decision.copies


def test_a_guard_that_fails_for_part_of_a_lanes_loop_cuts_its_range_with_the_reason():
    from test_constructs import guard_with_a_gap, predicated_split_past_the_end

    hm = thn.build(predicated_split_past_the_end)
    for stage in (0, "LowerOpaqueBlock", "RenormalizeSplitPattern", "AnnotateEntryFunc"):
        by_loop = {d.loop: d for d in hm.stage(stage).plan("fast").decisions}
        assert by_loop["i0"].strategy == P.LANES and by_loop["i0"].cut == (0, 2), stage
        assert by_loop["i0"].reason.endswith(
            "; only i0 in [0, 2) can pass the guard inside: the lanes run over those"), stage
        assert by_loop["i1"].cut is None and by_loop["k1"].cut is None
    by_loop = {d.loop: d for d in thn.build(guard_with_a_gap).stage(0).plan("fast").decisions}
    assert by_loop["i"].strategy == P.LANES and by_loop["i"].cut is None
    assert by_loop["j0"].cut == (10, 16) and by_loop["j1"].cut is None
    assert by_loop["m0"].cut == (0, 8) and by_loop["m1"].cut is None


def test_shared_memory_of_a_function_without_threads_is_planned_like_any_memory():
    from test_constructs import reduce_through_a_shared_cache

    hm = thn.build(reduce_through_a_shared_cache)
    plan = hm.stage("PlanAndUpdateBufferAllocationLocation").plan("fast")
    assert [(a.buffer, a.loops) for a in plan.allocations] == [("B", ("i", "j")), ("B_shared", ("i", "j"))]
    by_loop = {d.loop: d for d in hm.stage("StorageRewrite").plan("fast").decisions}
    assert by_loop["i"].strategy == by_loop["j"].strategy == P.LANES
    assert set(by_loop["i"].copies) == {"B", "B_shared"}


@T.prim_func
def copy_between_views_of_one_storage(a: T.handle, d: T.handle):
    """Two flat views of one allocation (as StorageRewrite and CSE leave a padded matmul's output):
    ``X1[i] = X2[i]`` touches the same element through both, each iteration its own."""
    n = T.int32()
    A = T.match_buffer(a, (n, 64))
    D = T.match_buffer(d, (n, 64))
    X = T.alloc_buffer(((n + 31) // 32 * 2048,))
    X1 = T.decl_buffer((n * 64,), data=X.data)
    X2 = T.decl_buffer(((n + 31) // 32 * 2048,), data=X.data)
    for i, j in T.grid((n + 31) // 32 * 32, 64):
        X2[i * 64 + j] = T.if_then_else(i < n, A[T.min(i, n - 1), j], T.float32(0)) * T.float32(3)
    for i, j in T.grid(n, 64):
        X1[i * 64 + j] = X2[i * 64 + j] + T.float32(1)
    for i, j in T.grid(n, 64):
        D[i, j] = X1[i * 64 + j]


@T.prim_func
def shift_between_views_of_one_storage(a: T.handle, d: T.handle):
    """``X1[i] = X2[i + 1]`` over one storage: iteration i reads what iteration i + 1 writes."""
    A = T.match_buffer(a, (64,))
    D = T.match_buffer(d, (64,))
    X = T.alloc_buffer((65,))
    X1 = T.decl_buffer((64,), data=X.data)
    X2 = T.decl_buffer((65,), data=X.data)
    for i in range(65):
        X2[i] = T.if_then_else(i < 64, A[T.min(i, 63)], T.float32(0))
    for i in range(64):
        X1[i] = X2[i + 1] + T.float32(1)
    for i in range(64):
        D[i] = X1[i]


def _fast_exact_native(hm, *arrays):
    out = {}
    for mode in ("fast", "exact"):
        args = [a.copy() for a in arrays]
        hm.emulate(*args, mode=mode)
        out[mode] = args
    native = [a.copy() for a in arrays]
    hm.run_native(*native)
    for got_fast, got_exact, want in zip(out["fast"], out["exact"], native):
        np.testing.assert_array_equal(got_fast, want)
        np.testing.assert_array_equal(got_exact, want)


def test_views_of_one_storage_that_touch_the_same_element_per_iteration_run_as_lanes():
    hm = thn.build(copy_between_views_of_one_storage)
    by_loop = {}
    for d in hm.stage(0).plan("fast").decisions:
        by_loop.setdefault(d.loop, []).append(d)
    # The second nest reads X2 and writes X1, views of X: the same element in each iteration.
    assert [d.strategy for d in by_loop["i"]] == [P.LANES, P.LANES, P.LANES]
    _fast_exact_native(hm, _rand(5, 64), np.zeros((5, 64), "float32"))
    # A shift between the views is a carried dependence: serial, and still exact.
    hm = thn.build(shift_between_views_of_one_storage)
    decisions = hm.stage(0).plan("fast").decisions
    assert [d.strategy for d in decisions] == [P.LANES, P.SERIAL, P.LANES]
    assert decisions[1].reason == "X2 is written and accessed through several views"
    _fast_exact_native(hm, _rand(64), np.zeros(64, "float32"))


def test_an_index_below_a_symbolic_size_is_a_strided_view_not_a_checked_gather():
    # ``i * 64 + j < (n + 31) // 32 * 2048`` for ``i < (n + 31) // 32 * 32``: only the symbolic
    # bound of the loop proves it (the constant bounds know nothing of n).
    hm = thn.build(copy_between_views_of_one_storage)
    source = hm.stage(0).fast_source()
    assert "lanes_view(X2, (0,), ((4, (n + 31) // 32 * 32, (64,)), (5, 64, (1,))))" in source
    assert "store(X2" not in source
    _fast_exact_native(hm, _rand(37, 64), np.zeros((37, 64), "float32"))


def test_a_strided_read_the_other_lanes_reuse_is_gathered_once_per_step():
    # C[i, j] += A[i, k] * B[j, k]: B's column (a stride of 4096 elements) is broadcast over the
    # lanes of i; one contiguous copy per k instead of one gather per row, the same values.
    A = te.placeholder((8, 256), name="A")
    B = te.placeholder((64, 256), name="B")
    k = te.reduce_axis((0, 256), name="k")
    C = te.compute((8, 64), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    hm = thn.build([A, B, C])
    source = hm.stage(0).fast_source()
    assert "np.ascontiguousarray(B_by_k[k])" in source
    assert "np.ascontiguousarray(C" not in source  # the accumulator is no broadcast read
    _fast_exact_native(hm, _rand(8, 256), _rand(64, 256), np.zeros((8, 64), "float32"))


def test_the_ranges_of_the_loops_around_a_loop_bound_its_dependence_test():
    from test_constructs import tiles_through_a_cache_under_a_loop_of_one

    # C is written at w_0 * 64 + w_1 * 8 + w_3 and read at w_1 * 8 + ax: with w_0 in [0, 1) the two
    # differ by less than w_1's step 8 (as long as tiles stay blocks, until LowerOpaqueBlock).
    hm = thn.build(tiles_through_a_cache_under_a_loop_of_one)
    for stage in (0, "PlanAndUpdateBufferAllocationLocation", "LowerOpaqueBlock"):
        by_loop = {d.loop: d for d in hm.stage(stage).plan("fast").decisions}
        assert by_loop["w_1"].strategy == P.LANES, (stage, by_loop["w_1"].reason)
        assert by_loop["k"].strategy == P.SERIAL  # the reduction keeps its order


def test_lanes_take_array_axes_in_the_memory_order_of_the_store_past_loops_of_one():
    from test_constructs import tiles_with_loops_of_one_in_the_index

    source = thn.build(tiles_with_loops_of_one_in_the_index).stage(0).fast_source()
    # i (stride 8) on the first loop axis, j (stride 1) after it: not j first because the six
    # loops of one took the planned axes.
    assert "B_lanes = lanes_view(B, (0, 0), ((4, 4, (1, 0)), (5, 8, (0, 1))))" in source


# ---------------------------------------------------------------- fast mode never loses to exact
@T.prim_func
def _sum_rows(a: T.handle, b: T.handle):
    n = T.int32()
    A = T.match_buffer(a, (n, 16), "float32")
    B = T.match_buffer(b, (n,), "float32")
    for i in range(n):
        B[i] = T.float32(0)
        for j in range(16):
            B[i] = B[i] + A[i, j]


@T.prim_func
def _fill_let_extent(a: T.handle):
    n = T.int32()
    A = T.match_buffer(a, (n * 4,), "float32")
    m: T.let[T.int32] = n * 4  # CommonSubexprElim binds symbolic extents to let variables
    for i in range(m):
        A[i] = T.float32(1)


def test_a_let_bound_extent_counts_with_the_sizes_it_is_made_of():
    from tvm_hybrid_nb.codegen.cost import serial_cost

    assert serial_cost(_fill_let_extent) is None
    cost = serial_cost(_fill_let_extent, sizes={"n": 3})
    assert (cost.scalar, cost.lanes) == (1 + 12 * 2, 0)  # the let, then 12 steps of (store, loop step)


@T.prim_func
def _let_varying_past_int32(A: T.Buffer((4, 8), "float32")):
    for i in range(4):
        if i < 1:  # base stays in range where it is computed; its bound over i does not
            base: T.let[T.int32] = i * 1073741823 + 7
            for j in range(T.min(8, base)):
                A[i, j] = T.float32(1)


def test_a_let_that_varies_with_the_loops_around_is_not_taken_as_one_value(monkeypatch):
    # The fuzzer's pipeline seed 5 at CommonSubexprElim: the let's largest value, bound as an int32
    # constant for the next extent, made TVM raise "Literal value ... exceeds range of int32".
    from tvm_hybrid_nb.codegen.cost import serial_cost

    # The inner extent reads a let that varies with i: bounded by its expression over i's range
    # (min(8, ...) <= 8): 4 iterations of i, each with its if, its let and 8 of j with their store.
    assert serial_cost(_let_varying_past_int32).scalar == 4 * (1 + 1 + 1 + 8 * 2)
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)  # the suite turns it off (tests/conftest.py)
    hm = thn.build(_let_varying_past_int32)
    want = np.zeros((4, 8), "float32")
    want[0, :7] = 1  # only i = 0 passes the guard: base = 7
    for mode in ("exact", "fast"):
        np.testing.assert_array_equal(hm.emulate(np.zeros((4, 8), "float32"), stage=0, mode=mode), want)
    # TVM's own finding here: RemoveNoOp drops the j loop (its bound of i * 1073741823 + 7 over i < 4
    # wraps int32), so the native kernel writes nothing; the emulation of that stage says so.
    assert not hm.run_native(np.zeros((4, 8), "float32")).any()
    removed = next(st.index for st in hm.stages if st.name == "tirx.RemoveNoOp" and st.changed)
    assert not hm.emulate(np.zeros((4, 8), "float32"), stage=removed, mode="fast").any()


def test_a_tiny_kernel_in_fast_mode_runs_the_exact_plan_and_says_why(monkeypatch):
    from tvm_hybrid_nb.codegen import program_text

    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)  # the suite turns it off (tests/conftest.py)
    hm = _matmul(8)  # 8 x 8 x 9 statements: a fraction of a millisecond serially
    plan = hm.stage(0).plan("fast")
    assert plan.exact_reason.startswith("the serial run is cheap (")
    assert plan.summary().startswith("fast mode runs the exact plan: the serial run is cheap")
    assert [d.strategy for d in plan.decisions] == [P.SERIAL] * 3
    assert all(d.reason.startswith("fast mode runs the exact plan: ") for d in plan.decisions)
    assert plan.as_dict()["exact_reason"] == plan.exact_reason
    # Decided before emission: the fast script is the exact script, its header says why.
    fast_source = hm.stage(0).fast_source()
    assert "Fast mode runs the exact plan: the serial run is cheap" in fast_source
    assert program_text(fast_source) == program_text(hm.stage(0).source)
    a, b = _rand(8, 8), _rand(8, 8)
    fast = hm.emulate(a, b, np.zeros((8, 8), "float32"), mode="fast").copy()
    np.testing.assert_array_equal(fast, hm.emulate(a, b, np.zeros((8, 8), "float32"), mode="exact"))
    np.testing.assert_allclose(fast, a @ b, rtol=1e-5, atol=1e-5)


def test_a_big_kernel_in_fast_mode_still_runs_as_lanes(monkeypatch):
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    hm = _matmul(128)  # 2 million statements serially: seconds; the analysis takes milliseconds
    plan = hm.stage(0).plan("fast")
    assert plan.exact_reason == ""
    by_loop = {d.loop: d for d in plan.decisions}
    assert by_loop["i"].strategy == P.LANES and by_loop["j"].strategy == P.LANES
    a, b = _rand(128, 128), _rand(128, 128)
    np.testing.assert_allclose(hm.emulate(a, b, np.zeros((128, 128), "float32"), mode="fast"), a @ b,
                               rtol=1e-4, atol=1e-4)


def test_the_exact_plan_of_a_tiny_gpu_kernel_covers_the_kernels_it_launches(monkeypatch):
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    hm = thn.build(_gpu_reverse_in_blocks, target="cuda")
    a = _rand(64)
    want = a.reshape(2, 32)[:, ::-1].reshape(64)
    launched = 0
    for stage in hm.emulatable_stages:
        plan = stage.plan("fast")
        assert plan.exact_reason, stage.label
        assert plan.lane_loops() == []  # the blocks run one after another, as in exact mode
        for sub in plan.launched.values():
            launched += 1
            assert sub.mode == "fast" and sub.exact_reason == plan.exact_reason
        np.testing.assert_array_equal(hm.emulate(a, np.zeros(64, "float32"), stage=stage.index, mode="fast"), want)
    assert launched  # the stages after SplitHostDevice launch the device kernel


def test_the_serial_cost_counts_statements_from_the_extents_and_binds_symbolic_sizes(monkeypatch):
    from tvm_hybrid_nb.codegen.cost import serial_cost

    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    func = _sum_rows
    assert serial_cost(func) is None  # n is unknown: assumed large, the analysis runs
    assert C.exact_plan_reason(func) == ""
    cost = serial_cost(func, sizes={"n": 4})
    # per i: B[i] = 0, the j loop's 16 steps of (the store and the loop's own step), the i loop's step
    assert (cost.scalar, cost.lanes) == (4 * (1 + 16 * 2 + 1), 0)
    assert C.exact_plan_reason(func, sizes={"n": 4}).startswith("the serial run with n = 4 is cheap (136 statement executions")
    assert C.exact_plan_reason(func, sizes={"n": 1 << 20}) == ""
    hm = thn.build(func)
    plan = hm.stage(0).plan("fast")
    assert plan.exact_reason == "" and plan.decisions[0].strategy == P.LANES
    # Run on 5 rows, the fast kernel is the exact one for n = 5, and its plan says so; a million rows get lanes.
    small = hm.stage(0).kernel("fast", sizes={"n": 5})
    assert small.plan.exact_reason.startswith("the serial run with n = 5 is cheap")
    assert small.plan.decisions[0].strategy == P.SERIAL and "with n = 5" in small.plan.decisions[0].reason
    big = hm.stage(0).kernel("fast", sizes={"n": 1 << 20})
    assert big.plan.exact_reason == "" and big.plan.decisions[0].strategy == P.LANES
    for rows in (5, 64):
        a = _rand(rows, 16)
        np.testing.assert_allclose(hm.emulate(a, np.zeros(rows, "float32"), mode="fast"), a.sum(axis=1),
                                   rtol=1e-5, atol=1e-5)


@T.prim_func
def cache_filled_by_a_loop_nest(A: T.Buffer((16, 32), "float32"), B: T.Buffer((16, 32), "float32")):
    """A per-row cache that an inner loop nest fills whole (two vector stores an iteration, as
    UnrollLoop leaves a tile) before the row reads it, a vector of 8 spanning both stores' elements."""
    C = T.alloc_buffer((32,))
    for i in range(16):
        for j0 in range(8):
            C[j0 * 4:j0 * 4 + 2] = T.Broadcast(T.float32(0), 2)
            C[j0 * 4 + 2:j0 * 4 + 4] = T.Broadcast(T.float32(0), 2)
        for k, j in T.grid(3, 32):
            C[j] = C[j] + A[i, j] * T.float32(k)
        for j0 in range(4):
            B[i, j0 * 8:j0 * 8 + 8] = C[T.Ramp(j0 * 8, 1, 8)]


@T.prim_func
def cache_filled_but_one_element(A: T.Buffer((16, 32), "float32"), B: T.Buffer((16, 32), "float32")):
    """The same, but the fill skips the last element: row i reads C[31] as row i - 1 left it."""
    C = T.alloc_buffer((32,))
    for i in range(16):
        for j in range(31):
            C[j] = T.float32(0)
        if i == 0:
            C[31] = T.float32(0)
        for k, j in T.grid(3, 32):
            C[j] = C[j] + A[i, j] * T.float32(k)
        for j in range(32):
            B[i, j] = C[j]


@T.prim_func
def carried_past_the_first_iteration(A: T.Buffer((8,), "float32"), Out: T.Buffer((8,), "float32")):
    """Only the first iteration of l writes B[0]; the others read B[1] as iteration i - 1 left it."""
    B = T.alloc_buffer((2,))
    for i in range(8):
        for l in range(2):
            if l == 0:
                B[0] = A[i]
                if i == 0:
                    B[1] = T.float32(0)
            else:
                Out[i] = B[1] + B[0]
                B[1] = A[i]


def test_an_allocation_an_inner_loop_nest_fills_whole_before_reading_is_privatised():
    hm = thn.build(cache_filled_by_a_loop_nest)
    a = _rand(16, 32)
    want = (a * np.float32(0) + a * np.float32(1)) + a * np.float32(2)
    by_loop = {d.loop: d for d in hm.stage(0).plan("fast").decisions}
    assert by_loop["i"].strategy == P.LANES and by_loop["i"].copies == ("C",)
    assert by_loop["i"].reason.startswith("iterations independent once each writes C before reading it")
    assert by_loop["k"].strategy == P.SERIAL  # k sums into C, in the IR's order
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros((16, 32), "float32"), mode=mode), want)
    # One element short of whole: the rows share C[31] (the first row's sum runs on), so i stays serial.
    hm = thn.build(cache_filled_but_one_element)
    (decision, *_) = hm.stage(0).plan("fast").decisions
    assert decision.loop == "i" and decision.strategy == P.SERIAL and not decision.copies
    want[:, :31] = (a[:, :31] * np.float32(0) + a[:, :31] * np.float32(1)) + a[:, :31] * np.float32(2)
    last = np.float32(0)
    for i in range(16):
        last = ((last + a[i, 31] * np.float32(0)) + a[i, 31] * np.float32(1)) + a[i, 31] * np.float32(2)
        want[i, 31] = last
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros((16, 32), "float32"), mode=mode), want)
    # What only a loop's first iteration writes is not written by the others.
    hm = thn.build(carried_past_the_first_iteration)
    (decision, *_) = hm.stage(0).plan("fast").decisions
    assert decision.loop == "i" and decision.strategy == P.SERIAL and not decision.copies
    a = _rand(8)
    want = a + np.concatenate([[0], a[:-1]]).astype("float32")
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros(8, "float32"), mode=mode), want)


@T.prim_func
def row_max_recomputed_per_column(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
    """Every column j recomputes its row's maximum in scratch memory shared by all (through a flat
    view, as StorageRewrite leaves it): the iterations of j write M and S alike, each before reading."""
    M = T.alloc_buffer((16,))
    S = T.alloc_buffer((1,))
    for i, j in T.grid(4, 16):
        M1 = T.decl_buffer((16,), data=M.data)
        for k in range(16):
            M[k] = A[i, k] * T.float32(2)
        for k in range(16):
            if k == 0:
                S[0] = T.float32(-1e30)
            S[0] = T.max(S[0], M1[k])
        B[i, j] = A[i, j] - S[0]


@T.prim_func
def row_sum_carried_across_columns(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
    """Written alike by every column, but read before written: the sum runs on from column to column."""
    S = T.alloc_buffer((1,))
    for i in range(4):
        S[0] = T.float32(0)
        for j in range(16):
            for k in range(16):
                S[0] = S[0] + A[i, k]
            B[i, j] = S[0]


@T.prim_func
def row_max_that_depends_on_the_column(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
    """Written before read by every column, but not alike: column j's maximum starts from A[i, j]
    (read through a view: no copy per lane either)."""
    S = T.alloc_buffer((1,))
    for i, j in T.grid(4, 16):
        S1 = T.decl_buffer((1,), data=S.data)
        S[0] = A[i, j]
        for k in range(16):
            S[0] = T.max(S1[0], A[i, k] * T.float32(0.5))
        B[i, j] = S[0]


@T.prim_func
def max_recomputed_per_parallel_column(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    """A parallel loop whose iterations write S alike (read through a view: no copy per lane):
    chunks on several cores would race on S."""
    S = T.alloc_buffer((1,))
    for j in T.parallel(16):
        S1 = T.decl_buffer((1,), data=S.data)
        S[0] = T.float32(-1e30)
        for k in range(16):
            S[0] = T.max(S1[0], A[k])
        B[j] = A[j] - S[0]


def test_iterations_that_write_scratch_alike_before_reading_it_run_as_lanes_on_one_copy():
    a = _rand(4, 16)
    hm = thn.build(row_max_recomputed_per_column)
    by_loop = {d.loop: d for d in hm.stage(0).plan("fast").decisions}
    assert by_loop["j"].strategy == P.LANES and not by_loop["j"].copies
    assert by_loop["j"].reason == ("iterations independent once each writes M, S alike (the same values, whatever "
                                   "the iteration) before reading it: all of them run at once as array lanes")
    want = a - (a * np.float32(2)).max(axis=1, keepdims=True)
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros((4, 16), "float32"), mode=mode), want)
    hm = thn.build(max_recomputed_per_parallel_column)
    (decision, *_) = hm.stage(0).plan("fast").decisions
    assert decision.loop == "j" and decision.strategy == P.LANES  # not parallel chunks
    b = a[0]
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(b, np.zeros(16, "float32"), mode=mode), b - b.max())
    # Not alike before read, or not alike: j stays serial.
    hm = thn.build(row_sum_carried_across_columns)
    by_loop = {d.loop: d for d in hm.stage(0).plan("fast").decisions}
    assert by_loop["j"].strategy == P.SERIAL
    assert by_loop["j"].reason == "carried dependence on S: two iterations of j may touch the same element"
    want = np.zeros((4, 16), "float32")
    for i in range(4):
        s = np.float32(0)
        for j in range(16):
            for k in range(16):
                s = np.float32(s + a[i, k])
            want[i, j] = s
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros((4, 16), "float32"), mode=mode), want)
    hm = thn.build(row_max_that_depends_on_the_column)
    by_loop = {d.loop: d for d in hm.stage(0).plan("fast").decisions}
    assert by_loop["j"].strategy == P.SERIAL
    want = np.maximum(a, (a * np.float32(0.5)).max(axis=1, keepdims=True))
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros((4, 16), "float32"), mode=mode), want)


@T.prim_func
def init_under_a_condition_on_a_bound_variable(A: T.Buffer((16, 8, 8), "float32"), B: T.Buffer((16, 8), "float32")):
    """A per-row sum whose start is under a condition that reads k0 through a bound variable (as
    CommonSubexprElim leaves it): the must-write walk tells k0's first iteration from the others."""
    C = T.alloc_buffer((8,))
    for i in range(16):
        for k0, k1, j in T.grid(4, 2, 8):
            v: T.let[T.int32] = k0 * 2
            if v + k1 == 0:
                C[j] = T.float32(0)
            C[j] = C[j] + A[i, v + k1, j]
        for j in range(8):
            B[i, j] = C[j]


def test_a_condition_through_a_bound_variable_still_tells_the_first_iteration():
    hm = thn.build(init_under_a_condition_on_a_bound_variable)
    by_loop = {d.loop: d for d in hm.stage(0).plan("fast").decisions}
    assert by_loop["i"].strategy == P.LANES and by_loop["i"].copies == ("C",)
    assert by_loop["k0"].strategy == by_loop["k1"].strategy == P.SERIAL
    a = _rand(16, 8, 8)
    want = np.zeros((16, 8), "float32")
    for k in range(8):
        want = want + a[:, k, :]
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros((16, 8), "float32"), mode=mode), want)


@T.prim_func
def _search_sorted(a: T.handle, q: T.handle, o: T.handle):
    A = T.match_buffer(a, (16,), "float32")
    Q = T.match_buffer(q, (4,), "float32")
    O = T.match_buffer(o, (4,), "int32")
    lo = T.alloc_buffer((1,), "int32", scope="local")
    hi = T.alloc_buffer((1,), "int32", scope="local")
    for i in range(4):
        lo[0] = 0
        hi[0] = 16
        while lo[0] < hi[0]:  # a binary search, as in TVM's sorts and searchsorted
            if A[(lo[0] + hi[0]) // 2] < Q[i]:
                lo[0] = (lo[0] + hi[0]) // 2 + 1
            else:
                hi[0] = (lo[0] + hi[0]) // 2
        O[i] = lo[0]
        for v in range(-3):  # a pass that runs at larger sizes only: its data-dependent loop costs nothing
            for w in range(T.Cast("int32", A[v])):
                O[i] = O[i] + w


@T.prim_func
def _fill_ragged(b: T.handle):
    B = T.match_buffer(b, (32,), "float32")
    for i in range(4):
        for j in range(T.min(8, 10 - i * 3)):  # an extent of the loop around: at most 8
            B[i * 8 + j] = T.float32(1)


def test_a_while_loop_counts_an_assumed_number_of_iterations_and_a_loop_of_none_costs_nothing(monkeypatch):
    from tvm_hybrid_nb.codegen import cost as analysis

    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    cost = analysis.serial_cost(_search_sorted)
    assert cost is not None  # was unknown: the analysis always ran, fast mode slower than exact
    monkeypatch.setattr(analysis, "WHILE_ASSUMED_ITERATIONS", 2 * analysis.WHILE_ASSUMED_ITERATIONS)
    assert analysis.serial_cost(_search_sorted).scalar > cost.scalar  # the body counts that often
    assert analysis.serial_cost(_search_sorted).size == cost.size
    assert C.exact_plan_reason(_search_sorted).startswith("the serial run is cheap")
    hm = thn.build(_search_sorted)
    assert hm.stage(0).plan("fast").exact_reason
    a, q = np.sort(_rand(16)), _rand(4)
    want = np.searchsorted(a, q, side="left").astype("int32")
    for stage in hm.emulatable_stages:
        for mode in ("fast", "exact"):
            np.testing.assert_array_equal(hm.emulate(a, q, np.zeros(4, "int32"), stage=stage.index, mode=mode), want)


def test_an_extent_of_the_loops_around_counts_with_its_largest_value():
    from tvm_hybrid_nb.codegen.cost import serial_cost

    cost = serial_cost(_fill_ragged)
    assert (cost.scalar, cost.lanes) == (4 * (8 * 2 + 1), 0)  # per i: 8 (store, step), the i loop's step


def test_the_plan_shown_for_symbolic_sizes_says_each_call_decides_and_a_small_call_runs_the_exact_plan(monkeypatch):
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    hm = thn.build(_sum_rows)
    shown = hm.stage(0).plan("fast")
    assert shown.decisions[0].strategy == P.LANES and not shown.exact_reason
    assert shown.per_call.startswith("this plan is for large sizes: each call decides with the sizes")
    assert shown.summary().endswith(shown.per_call) and shown.as_dict()["per_call"] == shown.per_call
    assert shown.per_call in hm.explain(0)
    panel = ui.stage_panel(hm.stage(0), hm.stages, run_compare=None)  # what the explorer shows above the source
    assert "each call decides with the sizes of its arguments" in panel.content.value
    # What a call on 5 rows runs: the exact plan, and its plan says so; the shown plan is unchanged.
    assert hm.stage(0).kernel("fast", sizes={"n": 5}).plan.exact_reason.startswith("the serial run with n = 5")
    a = _rand(5, 16)
    np.testing.assert_allclose(hm.emulate(a, np.zeros(5, "float32"), mode="fast"), a.sum(axis=1), rtol=1e-5, atol=1e-5)
    # A kernel whose cost needs no sizes gets no rule: its plan is the one every call runs.
    assert _matmul(8).stage(0).plan("fast").per_call == ""


def test_the_explorer_compare_says_when_a_small_call_ran_the_exact_plan(monkeypatch):
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    hm = thn.build(_sum_rows)
    ex = ui.explorer(hm, reference="input", inputs=[_rand(5, 16), np.zeros(5, "float32")])
    compare = ex.panel(0).compare
    compare.button.click()
    assert compare.controls.run is not None and compare.controls.run.join(60), "the run did not finish"
    assert "MATCH" in compare.result.value
    assert "fast mode ran the exact plan: the serial run with n = 5 is cheap" in compare.result.value
    assert compare.last_result.exact_reason.startswith("the serial run with n = 5 is cheap")
    assert "fast mode ran the exact plan: the serial run with n = 5" in str(compare.last_result)
    big = hm.compare(_rand(1 << 14, 16), np.zeros(1 << 14, "float32"), reference="input", mode="fast")
    assert big.ok and big.exact_reason == ""  # ran the plan shown above the source
    assert "ran the exact plan" not in str(big)
    ex.close()


def _softmax_recomputed_per_element(fill: int):
    """dlight.cpu's softmax of one row of 100 at stage 0: every element (a parallel loop) recomputes
    the row's maximum, exponentials and sum in scratch buffers at the root block, through loops split
    by 16 under the guard ``< 100`` (reductions with an init; block reads and writes mention the
    buffers).  ``fill`` < 100: the exponentials are written short of what the sum reads."""

    @T.prim_func(s_tir=True)
    def softmax(A: T.Buffer((100,), "float32"), B: T.Buffer((100,), "float32")):
        mx = T.sblock_alloc_buffer((1,))
        ex = T.sblock_alloc_buffer((100,))
        sm = T.sblock_alloc_buffer((1,))
        for i in T.parallel(100):
            for k0, k1 in T.grid(7, 16):
                with T.sblock("max"):
                    vk = T.axis.reduce(100, k0 * 16 + k1)
                    T.where(k0 * 16 + k1 < 100)
                    T.reads(A[vk])
                    T.writes(mx[0])
                    with T.init():
                        mx[0] = T.float32(-3.0e38)
                    mx[0] = T.max(mx[0], A[vk])
            for j0 in range(7):
                for j1 in T.vectorized(16):
                    with T.sblock("exp"):
                        vj = T.axis.spatial(100, j0 * 16 + j1)
                        T.where(j0 * 16 + j1 < fill)
                        T.reads(A[vj], mx[0])
                        T.writes(ex[vj])
                        ex[vj] = T.exp(A[vj] - mx[0])
            for k0, k1 in T.grid(7, 16):
                with T.sblock("sum"):
                    vk = T.axis.reduce(100, k0 * 16 + k1)
                    T.where(k0 * 16 + k1 < 100)
                    T.reads(ex[vk])
                    T.writes(sm[0])
                    with T.init():
                        sm[0] = T.float32(0)
                    sm[0] = sm[0] + ex[vk]
            with T.sblock("norm"):
                vi = T.axis.spatial(100, i)
                T.reads(ex[vi], sm[0])
                T.writes(B[vi])
                B[vi] = ex[vi] / sm[0]

    return softmax


def _outer_loop_and_allocations(func):
    """The outermost loop of ``func`` and its root block's allocations, by name."""
    body = func.body.block.body
    return body, {str(b.name): b for b in func.body.block.alloc_buffers}


def test_scratch_filled_under_a_split_guard_before_reading_is_recomputed_once_for_all_elements():
    # The parallel loop of dlight.cpu's softmax at stage 0 ran serially (45 s for a row of 1000):
    # block reads/writes counted as other uses, a reduction's init did not count as a write, and
    # the exponentials written under a split's guard did not count as written.  Then every element
    # recomputed the row's max, exponentials and sum in a copy of its own (quadratic: 52 s per stage
    # for a row of 32,000); every element computes them alike, so once serves them all.
    from tvm_hybrid_nb.codegen.sharing import written_before_read

    func = _softmax_recomputed_per_element(100)
    loop, bufs = _outer_loop_and_allocations(func)
    assert all(written_before_read(loop, bufs[name], func.body) is None for name in ("mx", "ex", "sm"))
    a = _rand(100)
    hm = thn.build(func)
    for stage in (0, "s_tir.LowerInitBlock"):
        (decision, *_) = hm.stage(stage).plan("fast").decisions
        assert decision.loop == "i" and decision.strategy == P.LANES and not decision.copies, decision
        assert "each writes ex, mx, sm alike" in decision.reason, decision
    # Allocated inside the parallel loop: one copy per chunk of it, written once for the chunk's lanes.
    plan = hm.stage("s_tir.PlanAndUpdateBufferAllocationLocation").plan("fast")
    assert plan.decisions[0].strategy == P.PARALLEL_CHUNKS, plan.decisions[0]
    assert {a.buffer for a in plan.allocations if a.loops == ("i",)} == {"mx", "ex", "sm"}, plan.allocations
    for stage in (0, "s_tir.PlanAndUpdateBufferAllocationLocation"):
        got = {mode: hm.emulate(a, np.zeros(100, "float32"), stage=stage, mode=mode) for mode in ("fast", "exact")}
        np.testing.assert_array_equal(got["fast"], got["exact"])
        np.testing.assert_allclose(got["fast"], np.exp(a - a.max()) / np.exp(a - a.max()).sum(), rtol=1e-6)
    # Four exponentials short: the sum reads what an earlier element left in ex, so i stays serial.
    func = _softmax_recomputed_per_element(96)
    loop, bufs = _outer_loop_and_allocations(func)
    assert written_before_read(loop, bufs["ex"], func.body) is not None
    hm = thn.build(func)
    (decision, *_) = hm.stage(0).plan("fast").decisions
    assert decision.loop == "i" and decision.strategy == P.SERIAL, decision
    np.testing.assert_array_equal(hm.emulate(a, np.zeros(100, "float32"), mode="fast"),
                                  hm.emulate(a, np.zeros(100, "float32"), mode="exact"))


@T.prim_func
def compacted_scratch(A: T.Buffer((64, 64, 16), "float32"), C: T.Buffer((64, 64), "float32")):
    """A scratch element per (i, j), indexed as CompactBufferAllocation leaves it: ``B[i - i, j - j]``."""
    for i, j in T.grid(64, 64):
        B = T.alloc_buffer((1, 1))
        for l in range(16):
            if l == 0:
                B[i - i, j - j] = T.float32(0)
            B[i - i, j - j] = B[i - i, j - j] + A[i, j, l]
        C[i, j] = B[i - i, j - j]


def test_an_index_that_cancels_to_a_constant_is_viewed_not_gathered():
    # ``i - i`` is 0, not an interval [-63, 63]: the per-lane scratch is a strided view of its
    # copies (the 128**4 reduction of TVM's cache_read tests went from 15 s to 3 s at this stage).
    hm = thn.build(compacted_scratch)
    source = hm.stage(0).kernel("fast", False).source
    assert "lanes_view(B" in source and "load(B" not in source and "store(B" not in source, source
    a = _rand(64, 64, 16)
    want = np.zeros((64, 64), "float32")
    for l in range(16):
        want = want + a[:, :, l]
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros((64, 64), "float32"), mode=mode), want)


def _dlight_cpu(name, forward, spec, kernel="", **layers):
    """The dlight.cpu schedule of a one-method ``nn.Module``'s kernel (the one whose name holds
    ``kernel``), built; ``layers`` are its submodules."""
    from tvm.relax.frontend import nn

    from tvm_hybrid_nb import zoo

    class Model(nn.Module):
        def __init__(self):
            for attr, layer in layers.items():
                setattr(self, attr, layer)

    Model.forward = forward
    (chosen,) = [k for k in zoo.collect_kernels([(name, Model(), spec)]) if k.llvm is not None and kernel in k.name]
    target, mod = zoo.schedule(chosen.llvm, "dlight-cpu")
    return thn.build(mod, target=target)


def test_dlight_cpu_softmax_over_a_middle_axis_runs_its_rows_as_lanes_at_every_stage():
    # Each of the 80 rows recomputes its column's maximum and sum in scratch (8.9 s a stage for
    # 2 x 300 x 3 float16): the exponentials' reads under the split's guard index through the parallel
    # variable (``fused // 40``), the writes sit in a vectorized loop, and from StorageRewrite on the
    # scratch is reused through a view of the per-lane allocation.
    from tvm.relax.frontend.nn import op, spec

    hm = _dlight_cpu("sm1", lambda self, x: op.softmax(x, axis=1), {"x": spec.Tensor((2, 40, 3), "float32")})
    x = _rand(2, 40, 3)
    want = np.exp(x - x.max(axis=1, keepdims=True))
    want = want / want.sum(axis=1, keepdims=True)
    storage_rewrite = hm.stage("tirx.StorageRewrite").index
    checked = 0
    for stage in hm.stages[:hm.packed_api_index]:
        if not (stage.changed or stage.index == 0):
            continue
        (outer, *_) = stage.plan("fast").decisions
        assert outer.strategy == P.PARALLEL_CHUNKS, (stage.label, outer)
        if stage.index >= storage_rewrite:
            assert "view" in stage.kernel("fast", False).source.split("def main(")[1]
        got = {mode: hm.emulate(x, np.zeros_like(x), stage=stage.index, mode=mode) for mode in ("fast", "exact")}
        np.testing.assert_array_equal(got["fast"], got["exact"])
        np.testing.assert_allclose(got["fast"], want, rtol=1e-5, atol=1e-6)
        checked += 1
    assert checked > 10


def test_a_loop_fused_over_symbolic_sizes_runs_as_lanes():
    # dlight.cpu fuses a batched linear layer's b * n * 48 outputs into one parallel loop indexed
    # [f // (n * 48), f % (n * 48) // 48, f % 48]: one element per iteration, which the simplifier
    # cannot see for a symbolic n (2.9 s a stage for b = 4, n = 5).
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import spec

    hm = _dlight_cpu("lin", lambda self, x: self.layer(x), {"x": spec.Tensor(("b", "n", 64), "float32")},
                     kernel="matmul", layer=nn.Linear(64, 48))
    (outer, *_) = hm.stage(0).plan("fast").decisions
    assert outer.strategy == P.PARALLEL_CHUNKS, outer
    rng = np.random.default_rng(1)
    x, w, bias = _rand(3, 5, 64), rng.standard_normal((64, 48)).astype("float32"), _rand(48)
    want = x.astype(np.float64) @ w + bias
    for stage in (0, "s_tir.LowerOpaqueBlock"):
        got = {mode: hm.emulate(x, w, bias, np.zeros((3, 5, 48), "float32"), stage=stage, mode=mode)
               for mode in ("fast", "exact")}
        np.testing.assert_array_equal(got["fast"], got["exact"])
        np.testing.assert_allclose(got["fast"], want, rtol=1e-4, atol=1e-4)


def test_fold_radix_sums_a_decomposition_back_only_where_floor_division_allows():
    from tvm import tirx

    from tvm_hybrid_nb.codegen.radix import fold_radix

    f, n = tirx.Var("f", "int64"), tirx.Var("n", "int64")
    c48 = tirx.const(48, "int64")
    cases = [  # (expression, folds to f-free remainder?)
        tirx.FloorDiv(f, n * c48) * n * c48 + tirx.FloorDiv(tirx.FloorMod(f, n * c48), c48) * c48
        + tirx.FloorMod(f, c48),
        tirx.FloorDiv(f, n) * n * 3 - tirx.FloorMod(f, n) * 3,  # a difference: nothing to fold
        tirx.FloorDiv(f, n) * (n + 1) + tirx.FloorMod(f, n),  # not a multiple of n
        tirx.FloorDiv(tirx.FloorMod(f, n * 6), c48) * c48 + tirx.FloorMod(f, c48),  # 48 need not divide 6n
    ]
    folded = [fold_radix(tvm.sym.Analyzer().simplify(e)) for e in cases]
    assert str(folded[0]) == "f"
    for expr, out in zip(cases, folded):
        for fv in range(-300, 300, 7):
            for nv in (-5, -1, 1, 3, 8):
                env = {"f": fv, "n": nv}
                assert _eval(expr, env) == _eval(out, env), (expr, out, env)


def _eval(expr, env):
    """An integer TIR expression's value with numpy's floor semantics (TIR's FloorDiv/FloorMod)."""
    key = type(expr).__name__
    if key == "IntImm":
        return int(expr.value)
    if key == "Var":
        return env[expr.name]
    a, b = _eval(expr.a, env), _eval(expr.b, env)
    return {"Add": a + b, "Sub": a - b, "Mul": a * b, "FloorDiv": a // b if b else 0,
            "FloorMod": a % b if b else 0}[key]


def _window_sums(kind: str):
    """Every output recomputes its input window in scratch the iterations share (as dlight.cpu's
    convolutions recompute the padded input): ``W[i + k]`` holds ``2 * A[i + k]`` (its index decides
    it: "by_index"), ``k * A[i + k]`` (it does not: iterations i and i + 1 write W[i + 1]
    differently), or two stores write two functions of the index ("two_stores": lanes in lockstep
    would overwrite each other's W[i] with 3 * A[i] before the read)."""
    if kind == "two_stores":
        @T.prim_func
        def window_sums(A: T.Buffer((66,), "float32"), C: T.Buffer((64,), "float32")):
            W = T.alloc_buffer((66,))
            for i in T.parallel(64):
                W[i] = A[i] * T.float32(2)
                W[i + 1] = A[i + 1] * T.float32(3)
                C[i] = W[i] + W[i + 1]

        return window_sums
    scale = (lambda k: T.float32(2)) if kind == "by_index" else (lambda k: T.Cast("float32", k))

    @T.prim_func
    def window_sums(A: T.Buffer((66,), "float32"), C: T.Buffer((64,), "float32")):
        W = T.alloc_buffer((66,))
        for i in T.parallel(64):
            for k in range(3):
                W[i + k] = A[i + k] * scale(k)
            C[i] = W[i] + W[i + 1] + W[i + 2]

    return window_sums


@pytest.mark.parametrize("kind", ["by_index", "not_by_index", "two_stores"])
def test_lanes_share_scratch_written_by_index_when_their_copies_would_not_fit(monkeypatch, kind):
    # A 32-channel 3x3 convolution on 16 x 16 (dlight.cpu) wanted 324 MiB of per-lane copies of its
    # padded input and ran serially (5 s a stage); the lanes now share one copy when every write's
    # value is decided by the element's index.
    from tvm_hybrid_nb.codegen.buffers import BuffersMixin

    monkeypatch.setattr(BuffersMixin, "LANE_COPIES_MAX_BYTES", 128)  # 64 copies of 66 floats: 16 KiB
    hm = thn.build(_window_sums(kind))
    (outer, *_) = hm.stage(0).plan("fast").decisions
    if kind == "by_index":
        assert outer.strategy == P.LANES and "values their index decides" in outer.reason, outer
    else:
        assert outer.strategy == P.SERIAL and "per lane would need" in outer.reason, outer
    a = _rand(66)
    if kind == "two_stores":
        want = 2 * a[:64] + 3 * a[1:65]
    else:
        k = np.array([2.0, 2.0, 2.0] if kind == "by_index" else [0.0, 1.0, 2.0], "float32")
        want = sum(a[j:j + 64] * k[j] for j in range(3))
    for mode in ("fast", "exact"):
        np.testing.assert_allclose(hm.emulate(a, np.zeros(64, "float32"), mode=mode), want, rtol=1e-6)


@T.prim_func
def _rows_in_guarded_chunks(A: T.Buffer((4, 2000), "float32"), B: T.Buffer((4, 2000), "float32")):
    # topi's GPU sort after UnifyThreadBinding: rows r, indexed as r % 4 * 2000 + r // 4 (r < 4), in
    # chunks c of 128 (2 values each of 64 threads t, fixed around them) within the guard.
    for t in range(64):
        for c in range(16):
            for r in range(4):
                for v in range(2):
                    if c * 128 + t * 2 + v < 2000:
                        B[(r % 4 * 2000 + r // 4 + c * 128 + t * 2 + v) // 2000,
                          (r % 4 * 2000 + r // 4 + c * 128 + t * 2 + v) % 2000] = \
                            A[(r % 4 * 2000 + r // 4 + c * 128 + t * 2 + v) // 2000,
                              (r % 4 * 2000 + r // 4 + c * 128 + t * 2 + v) % 2000] * T.float32(2)


def test_loops_are_independent_over_the_values_their_variables_take():
    # Over r < 4, r % 4 * 2000 + r // 4 is r * 2000: the rows are independent, and so are the chunks
    # (r's digits inside them).  Both ran serially: topi's top-k over 2,000 words, 5 s a stage.
    hm = thn.build(_rows_in_guarded_chunks)
    decisions = {d.loop: d for d in hm.stage(0).plan("fast").decisions}
    assert decisions["c"].strategy == P.LANES and decisions["r"].strategy == P.LANES, hm.explain(0)
    a = _rand(4, 2000)
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros((4, 2000), "float32"), mode=mode), a * 2)


@T.prim_func(s_tir=True)
def _row_sums_in_root_scratch(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64,), "float32")):
    """A parallel loop over rows whose sum goes through scratch at the root block, its reduction loop
    split by 16 with no guard (a length the split divides): only the init tells the first step."""
    sm = T.sblock_alloc_buffer((1,))
    for i in T.parallel(64):
        for k0, k1 in T.grid(4, 16):
            with T.sblock("sum"):
                vi = T.axis.spatial(64, i)
                vk = T.axis.reduce(64, k0 * 16 + k1)
                T.reads(A[vi, vk])
                T.writes(sm[0])
                with T.init():
                    sm[0] = T.float32(0)
                sm[0] = sm[0] + A[vi, vk]
        with T.sblock("out"):
            vi = T.axis.spatial(64, i)
            T.reads(sm[0])
            T.writes(B[vi])
            B[vi] = sm[0]


def test_a_reduction_init_without_a_guard_still_tells_the_first_step_and_the_scratch_is_privatised():
    # Without a predicate, no condition named the reduction loops: one walk over all their
    # iterations could not count the init as a write, and the parallel loop stayed serial at stage 0
    # (an LM head's softmax over 4,096 words at dlight.cpu's stage 0 took 58 s).
    hm = thn.build(_row_sums_in_root_scratch)
    for stage in (0, "s_tir.LowerInitBlock"):
        (decision, *_) = hm.stage(stage).plan("fast").decisions
        assert decision.loop == "i" and decision.strategy == P.PARALLEL_CHUNKS, decision
        assert decision.copies == ("sm",), decision
    a = _rand(64, 64)
    want = np.zeros(64, "float32")
    for k in range(64):
        want = want + a[:, k]
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros(64, "float32"), mode=mode), want)


def test_a_statement_the_chunk_lanes_compute_alike_does_not_count_them_when_sizing_chunks():
    # Sized by every lane axis around it, the exponentials' statement (32,000 lanes of the row, alike
    # for the 32,000 lanes of the parallel loop) asked for 488 chunks of the parallel loop, each
    # recomputing the row: 52 s per stage.  It counts as one row (7 x 16 lanes, not 100 x 7 x 16).
    func = _softmax_recomputed_per_element(100)
    hm = thn.build(func)
    stage = hm.stage("s_tir.PlanAndUpdateBufferAllocationLocation")
    source = stage.kernel("fast", False).source
    assert "parallel_chunks(i_chunk, 0, 100, 112," in source, source


def _window_sums_in_root_scratch(kind: str):
    """``_window_sums`` as a schedule writes it before ``PlanAndUpdateBufferAllocationLocation``: the
    scratch at the root block, which that pass moves into the parallel loop (each iteration of the
    compiled loop has its own).  ``W[i + k]`` holds ``2 * A[i + k]`` ("by_index"); "reads_unwritten"
    also reads ``W[i + 3]``, which iteration i never writes (a bug the sanitizer must still report);
    "race" writes ``C[i // 2]`` from two iterations with different values (a race it must report)."""
    extra = 1 if kind == "reads_unwritten" else 0

    @T.prim_func(s_tir=True)
    def window_sums(A: T.Buffer((67,), "float32"), C: T.Buffer((64,), "float32")):
        W = T.sblock_alloc_buffer((67,))
        for i in T.parallel(64):
            for k in range(3):
                W[i + k] = A[i + k] * T.float32(2)
            if kind == "race":
                C[i // 2] = W[i] + W[i + 1] + W[i + 2]
            else:
                C[i] = W[i] + W[i + 1] + W[i + 2] + W[i + 3] * T.float32(extra)

    return window_sums


def _checked_plan_without_room_for_copies(monkeypatch, func, copies_max_bytes: int):
    """``func`` built where per-lane copies over ``copies_max_bytes`` are refused, and the plan of its
    stage 0 under the sanitizers: ``(module, plan, outermost decision)``."""
    from tvm_hybrid_nb.codegen.buffers import BuffersMixin

    monkeypatch.setattr(BuffersMixin, "LANE_COPIES_MAX_BYTES", copies_max_bytes)
    hm = thn.build(func)
    plan = hm.stage(0).plan("fast", check=True)
    return hm, plan, plan.decisions[0]


def _assert_no_copy_shared_and_unwritten_read_reported(hm, outer, *args):
    """Scratch an iteration reads where it did not write is not shared: its loop runs serially, and
    check=True reports the read."""
    assert outer.strategy == P.SERIAL and "per lane would need" in outer.reason, outer
    with pytest.raises(EmulationError, match=r"never written"):
        hm.emulate(*args, mode="fast", check=True)


@pytest.mark.parametrize("kind", ["by_index", "reads_unwritten", "race"])
def test_race_check_lanes_share_scratch_each_iteration_owns_when_their_copies_would_not_fit(monkeypatch, kind):
    # Under check=True, dlight.cpu's padded 3 x 3 conv (96 -> 32 channels on 32 x 32) wanted a copy of
    # its padded input per race-check lane (13.9 GiB) at every stage before
    # PlanAndUpdateBufferAllocationLocation, and ran its 32,768 iterations one by one: 430 s.  Scratch
    # each iteration owns, written by index before it is read, is one copy for all the lanes; the
    # lanes' other accesses are still compared.
    hm, plan, outer = _checked_plan_without_room_for_copies(monkeypatch, _window_sums_in_root_scratch(kind),
                                                           128)  # 64 copies of 67 floats: 17 KiB
    a = _rand(67)
    out = np.zeros(64, "float32")
    if kind == "reads_unwritten":
        _assert_no_copy_shared_and_unwritten_read_reported(hm, outer, a, out)
        return
    assert outer.strategy == P.RACE_LANES and "one copy serves the lanes" in outer.reason, outer
    assert [(d.buffer, d.loops) for d in plan.allocations] == [("W", ("i",))], plan.allocations
    if kind == "race":
        with pytest.raises(EmulationError, match=r"data race on C\["):
            hm.emulate(a, out, mode="fast", check=True)
        return
    want = 2 * (a[:64] + a[1:65] + a[2:66])
    np.testing.assert_allclose(hm.emulate(a, out, mode="fast", check=True), want, rtol=1e-6)


@pytest.mark.parametrize("fill", [100, 96])
def test_race_check_lanes_share_scratch_every_iteration_writes_alike(monkeypatch, fill):
    # Under check=True, dlight.cpu's softmax over an LM head's 32,000 words wanted a copy of the row's
    # exponentials per race-check lane (4 GiB) and ran its parallel loop serially, recomputing the row
    # for each of the 32,000 elements.  Every iteration writes the row's maximum, exponentials and sum
    # alike before reading them: one copy serves all the lanes.  Four exponentials short (fill 96),
    # the sum reads elements its iteration never wrote: no copy is shared, and check=True says so.
    hm, plan, outer = _checked_plan_without_room_for_copies(monkeypatch, _softmax_recomputed_per_element(fill),
                                                           1024)  # 100 copies of 100 floats: 39 KiB
    a = _rand(100)
    if fill == 96:
        _assert_no_copy_shared_and_unwritten_read_reported(hm, outer, a, np.zeros(100, "float32"))
        return
    assert outer.strategy == P.RACE_LANES and "writes ex alike" in outer.reason, outer
    assert sorted(d.buffer for d in plan.allocations) == ["ex", "mx", "sm"], plan.allocations
    np.testing.assert_array_equal(hm.emulate(a, np.zeros(100, "float32"), mode="fast", check=True),
                                  hm.emulate(a, np.zeros(100, "float32"), mode="exact"))
    # Allocated inside the parallel loop (its iterations independent, plain lanes): the same.
    moved = hm.stage("s_tir.PlanAndUpdateBufferAllocationLocation")
    plan = moved.plan("fast", check=True)
    assert plan.decisions[0].strategy == P.LANES, plan.decisions[0]
    assert sorted(d.buffer for d in plan.allocations) == ["ex", "mx", "sm"], plan.allocations
    np.testing.assert_array_equal(hm.emulate(a, np.zeros(100, "float32"), stage=moved.index, mode="fast",
                                             check=True), hm.emulate(a, np.zeros(100, "float32"), mode="exact"))
