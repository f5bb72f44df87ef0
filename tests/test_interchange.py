"""Fast mode moves a nest's spatial loops outside its reduction loops where that is exact, and holds
the accumulator tile it then sums in one run in a contiguous copy (``held_copy``/``hold_back``).

MetaSchedule's CPU conv spaces (``test_cpu_c3d.c3d_0``) nest an output tile's serial loops inside the
reduction loops; every reduction step rewrote a strided view of the tile.  The kernels below have the
same shape, small; every stage is checked against TVM's native build, fast and exact bit for bit.
"""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen.interchange import reductions_inside
from tvm_hybrid_nb.runtime import held_copy, hold_back
from test_constructs import _rand, check_every_stage


@T.prim_func(s_tir=True)
def tile_inside_the_reduction(A: T.Buffer((16, 9, 8), "float32"), W: T.Buffer((9, 8), "float32"),
                              B: T.Buffer((16, 8), "float32")):
    # SSRSRS as MetaSchedule tiles a conv: rows (i_0) and channels (c) outside, the reduction (r_0,
    # r_1) around a serial output tile (i_3) that the lanes leave serial.
    C = T.sblock_alloc_buffer((16, 8))
    for i_0, c in T.grid(4, 8):
        for r_0, r_1, i_3 in T.grid(3, 3, 4):
            with T.sblock("C"):
                vi = T.axis.spatial(16, i_0 * 4 + i_3)
                vc = T.axis.spatial(8, c)
                vr = T.axis.reduce(9, r_0 * 3 + r_1)
                with T.init():
                    C[vi, vc] = T.float32(0)
                C[vi, vc] = C[vi, vc] + A[vi, vr, vc] * W[vr, vc]
        for ax in range(4):
            with T.sblock("B"):
                vi = T.axis.spatial(16, i_0 * 4 + ax)
                vc = T.axis.spatial(8, c)
                B[vi, vc] = C[vi, vc]


def test_a_tile_inside_its_reduction_is_summed_in_one_run_and_exact():
    args = [_rand(16, 9, 8), _rand(9, 8, seed=1), np.zeros((16, 8), "float32")]
    hm = check_every_stage(tile_inside_the_reduction, args, min_stages=5)
    plan = hm.stage(0).plan("fast")
    assert any("loop i_3 moved outside reduction loops r_0, r_1" in note for note in plan.interchanges)
    assert "loop i_3 moved outside reduction loops r_0, r_1" in plan.summary()
    source = hm.stage(0).fast_source()
    source = source[source.index("def tile_inside_the_reduction("):]  # the kernel, not the helpers' text
    # the tile's loop moved out, the whole accumulator runs as lanes, held across the reduction
    assert source.index("held_copy(") < source.index("for r_0 in") < source.index("hold_back(")
    # the exact plan keeps the IR's order
    exact = hm.stage(0).source
    exact = exact[exact.index("def tile_inside_the_reduction("):]
    assert exact.index("for r_0 in") < exact.index("for i_3 in") and "held_copy" not in exact


@T.prim_func(s_tir=True)
def tile_whose_elements_meet(A: T.Buffer((9, 8), "float32"), B: T.Buffer((12,), "float32")):
    # B[i + j] for a tile (i, j): two iterations of the tile reach one element, whose sum then
    # interleaves their steps; moved outside the reduction, the sum would be in another order.
    for r, i, j in T.grid(9, 4, 8):
        with T.sblock("B"):
            vr, vi, vj = T.axis.remap("RSS", [r, i, j])
            T.reads(B[vi + vj], A[vr, vj])
            T.writes(B[vi + vj])
            B[vi + vj] = B[vi + vj] + A[vr, vj] * T.float32(vi + 1)


@T.prim_func(s_tir=True)
def tile_reading_its_neighbour(A: T.Buffer((9, 8), "float32"), B: T.Buffer((9,), "float32")):
    # Each step reads the next element of the accumulator: iterations of the tile depend on each other.
    for r, i in T.grid(9, 8):
        with T.sblock("B"):
            vr, vi = T.axis.remap("RS", [r, i])
            T.reads(B[vi : vi + 2], A[vr, vi])
            T.writes(B[vi])
            B[vi] = B[vi] + B[vi + 1] * A[vr, vi]


def test_no_interchange_where_the_tile_elements_meet_or_depend_on_each_other():
    for func, args in ((tile_whose_elements_meet, [_rand(9, 8), _rand(12, seed=2)]),
                       (tile_reading_its_neighbour, [_rand(9, 8), _rand(9, seed=3)])):
        assert reductions_inside(func) == (func, [])
        hm = check_every_stage(func, args)
        assert not hm.stage(0).plan("fast").interchanges


def test_every_stage_of_the_tiled_kernel_is_interchanged_alike():
    hm = thn.build(tile_inside_the_reduction)
    stages = [s for s in hm.stages[:hm.packed_api_index] if s.changed]
    noted = [s.label for s in stages if s.plan("fast").interchanges]
    assert len(noted) == len(stages), f"not interchanged at {set(s.label for s in stages) - set(noted)}"


def test_a_held_copy_is_contiguous_and_goes_back_into_its_view():
    buffer = np.arange(64, dtype=np.float32).reshape(8, 8)
    view = buffer[::2, 1::3]
    held = held_copy(view)
    assert held is not view and held.flags.c_contiguous and np.array_equal(held, view)
    held += 100
    assert buffer[0, 1] == 1  # the buffer keeps its values until the copy goes back
    hold_back(view, held)
    assert np.array_equal(buffer[::2, 1::3], held) and buffer[0, 0] == 0


def test_a_view_whose_indices_meet_is_not_copied():
    buffer = np.zeros(16, np.float32)
    meeting = np.lib.stride_tricks.as_strided(buffer, (4, 4), (4, 4))  # element i + j
    assert held_copy(meeting) is meeting
    broadcast = np.lib.stride_tricks.as_strided(buffer, (4, 4), (0, 4))
    assert held_copy(broadcast) is broadcast


@T.prim_func(s_tir=True)
def seven_lane_loops_around_a_row(A: T.Buffer((4, 4, 4, 4, 4, 4, 4, 6), "float32"),
                                  B: T.Buffer((4, 4, 4, 4, 4, 4, 4, 6), "float32")):
    # Seven loops run as lanes take every array axis fast mode has for loops; the row loop inside is
    # independent too, and its iterations run in chunks on the cores, each one after another.
    for a0, a1, a2, a3, a4, a5, a6, j in T.grid(4, 4, 4, 4, 4, 4, 4, 6):
        with T.sblock("B"):
            v0, v1, v2, v3, v4, v5, v6, vj = T.axis.remap("SSSSSSSS", [a0, a1, a2, a3, a4, a5, a6, j])
            B[v0, v1, v2, v3, v4, v5, v6, vj] = A[v0, v1, v2, v3, v4, v5, v6, vj] * T.float32(vj + 1)


@T.prim_func(s_tir=True)
def seven_lane_loops_around_a_running_sum(A: T.Buffer((4, 4, 4, 4, 4, 4, 4, 6), "float32"),
                                          B: T.Buffer((4, 4, 4, 4, 4, 4, 4, 6), "float32")):
    for a0, a1, a2, a3, a4, a5, a6, j in T.grid(4, 4, 4, 4, 4, 4, 4, 5):
        with T.sblock("B"):
            v0, v1, v2, v3, v4, v5, v6, vj = T.axis.remap("SSSSSSSS", [a0, a1, a2, a3, a4, a5, a6, j])
            B[v0, v1, v2, v3, v4, v5, v6, vj + 1] = B[v0, v1, v2, v3, v4, v5, v6, vj] + A[v0, v1, v2, v3, v4, v5, v6, vj]


def test_independent_iterations_with_no_array_axis_left_run_in_chunks_on_the_cores():
    shape = (4, 4, 4, 4, 4, 4, 4, 6)
    hm = check_every_stage(seven_lane_loops_around_a_row, [_rand(*shape), np.zeros(shape, "float32")])
    plan = hm.stage(0).plan("fast")
    by_loop = {d.loop: d.strategy for d in plan.decisions}
    assert by_loop["j"] == "core chunks" and "loops j run in chunks on all cores" in plan.summary()
    assert "parallel_chunks(j_iterations, 0, 6, 16384 * 6)" in hm.stage(0).fast_source()
    # a running sum along the row: its iterations depend on each other, it stays serial
    hm = check_every_stage(seven_lane_loops_around_a_running_sum, [_rand(*shape), _rand(*shape, seed=4)])
    by_loop = {d.loop: (d.strategy, d.reason) for d in hm.stage(0).plan("fast").decisions}
    assert by_loop["j"][0] == "serial" and "carried dependence" in by_loop["j"][1]
