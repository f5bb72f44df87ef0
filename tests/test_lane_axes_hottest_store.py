"""The lanes of a nest are laid out in the memory order of the store that runs most often, not of
the first store in program order.

MetaSchedule's conv tiles first pad a tile of the input (one store per tile, all lanes at once) and
then accumulate into the output in serial reduction loops (57,624 times a tile in the conv3d space
``c3d_0`` of TVM's tests).  Laid out in the padding's order, the accumulator's lanes ran as runs of
32 contiguous floats (its two channel loops on axes apart); in the accumulation's order they merge
into runs of 64: that stage 12.6 -> 10.6 s.  The layout changes speed only: the values are exact
mode's and numpy's.
"""
from __future__ import annotations

import numpy as np
import tvm_ffi
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen.analysis import _hottest_store, _plan_lane_axes


@T.prim_func
def pad_then_accumulate(a: T.handle, w: T.handle, c: T.handle):
    A = T.match_buffer(a, (8, 4), "float32")
    W = T.match_buffer(w, (16,), "float32")
    C = T.match_buffer(c, (4, 8), "float32")
    P = T.alloc_buffer((8, 4), "float32")
    for i, j in T.grid(4, 8):
        P[j, i] = A[j, i] * T.float32(2)  # the first store: j is its slow index
        C[i, j] = T.float32(0)
        for k in range(16):  # the store that runs most often: i is its slow index
            C[i, j] = C[i, j] + P[j, i] * W[k]


def _outer_loop(func):
    loops = []
    tvm_ffi.structural_walk(func.body, lambda n: loops.append(n) if type(n).__name__ == "For" else None, order="pre")
    return loops[0]


def test_the_store_run_most_often_orders_the_lane_axes():
    loop = _outer_loop(pad_then_accumulate)
    as_lanes = lambda node: node.loop_var.name in ("i", "j")  # k is the serial reduction
    store, loops, _binds = _hottest_store(loop, [], [], as_lanes)
    assert store.buffer.name == "C" and [v.name for v in loops] == ["i", "j"]
    assert _hottest_store(loop, [], [], None)[0].buffer.name == "P"  # all lanes: each runs once, the first
    axes = _plan_lane_axes(loop.loop_var, loop.body, range(4, 11), as_lanes)
    by_name = {v.name: axes[v.__chandle__()] for v in (loop.loop_var, loop.body.loop_var)}
    assert by_name == {"i": 4, "j": 5}  # C's order (i slow); P's would give j 4, i 5


def test_the_laid_out_lanes_compute_what_exact_mode_and_numpy_do():
    hm = thn.build(pad_then_accumulate)
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    fast = hm.emulate(a, w, np.zeros((4, 8), np.float32), mode="fast")
    np.testing.assert_array_equal(fast, hm.emulate(a, w, np.zeros((4, 8), np.float32), mode="exact"))
    want = np.zeros((4, 8), np.float32)
    for k in range(16):  # each element's sum in the IR's order, in float32
        want = want + (a.T * np.float32(2)) * w[k]
    np.testing.assert_array_equal(fast, want)
    assert [d.loop for d in hm.stage(0).plan("fast").lane_loops()] == ["i", "j"]
