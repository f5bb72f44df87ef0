"""A grid's blocks run as lanes when each block stores an unrolled tile whose rows are guarded.

dlight's GPU matmul writes its output tile after ``UnrollLoop`` as one vector store per unrolled row
``k`` and column pair ``j``: ``C[tx * 8192 + k * 2048 + by * 64 + ty * 4 + j * 2 + lane]`` under
``tx * 4 + k < 7`` (7 rows of tokens).  As indexed, the blocks ``by`` touch their own columns, and the
copies' offsets ``k * 2048 + j * 2`` are digits of the same number.  Read under its guard, the row
``tx * 4 + k`` became one bounded term whose digit the offsets then overlapped, so the blocks ran one
after another: 2.0 s a stage for a 7 x 512 x 2,048 linear layer from ``UnrollLoop`` on, 0.26 s as lanes.
The guards only narrow what is touched, so indices that keep the blocks apart without them do so
under them too.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import plan as P

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
ROWS, COLS = 7, 16  # rows: tx * 4 + k (2 threads x 4 unrolled rows, guarded); columns: by * 4 + ty * 2 + lane


def _tile(thread_stride: int):
    """Each block ``by`` writes columns ``by * 4 + ty * thread_stride + lane`` of each row: its own for
    stride 2; with stride 4 its second thread writes the next block's first columns."""

    @T.prim_func
    def unrolled_tile(a: T.Buffer((ROWS * COLS + 8,), "float32"), c: T.Buffer((ROWS * COLS + 8,), "float32")):
        T.func_attr({"global_symbol": "main"})
        for by in T.thread_binding(4, thread="blockIdx.y"):
            for ty in T.thread_binding(2, thread="threadIdx.y"):
                for tx in T.thread_binding(2, thread="threadIdx.x"):
                    if tx * 4 + 0 < ROWS:
                        c[T.Ramp(tx * 64 + 0 * 16 + by * 4 + ty * thread_stride, 1, 2)] = a[T.Ramp(tx * 64 + 0 * 16 + by * 4 + ty * 2, 1, 2)] * T.Broadcast(T.float32(2), 2)
                    if tx * 4 + 1 < ROWS:
                        c[T.Ramp(tx * 64 + 1 * 16 + by * 4 + ty * thread_stride, 1, 2)] = a[T.Ramp(tx * 64 + 1 * 16 + by * 4 + ty * 2, 1, 2)] * T.Broadcast(T.float32(2), 2)
                    if tx * 4 + 2 < ROWS:
                        c[T.Ramp(tx * 64 + 2 * 16 + by * 4 + ty * thread_stride, 1, 2)] = a[T.Ramp(tx * 64 + 2 * 16 + by * 4 + ty * 2, 1, 2)] * T.Broadcast(T.float32(2), 2)
                    if tx * 4 + 3 < ROWS:
                        c[T.Ramp(tx * 64 + 3 * 16 + by * 4 + ty * thread_stride, 1, 2)] = a[T.Ramp(tx * 64 + 3 * 16 + by * 4 + ty * 2, 1, 2)] * T.Broadcast(T.float32(2), 2)

    return unrolled_tile


def _grid(func) -> P.LoopDecision:
    return next(d for d in thn.build(func, target=CUDA).stage(0).plan("fast").decisions if d.loop == "by")


def test_blocks_storing_a_guarded_unrolled_tile_run_as_lanes_and_match_exact_mode():
    func = _tile(2)
    decision = _grid(func)
    assert decision.strategy in (P.LANES, P.PARALLEL_CHUNKS), decision.reason
    a = np.random.default_rng(0).standard_normal(ROWS * COLS + 8).astype(np.float32)
    hm = thn.build(func, target=CUDA)
    fast = hm.emulate(a, np.zeros_like(a), stage=0, mode="fast")
    expected = np.zeros_like(a)
    expected[:ROWS * COLS] = a[:ROWS * COLS] * 2
    np.testing.assert_array_equal(fast, expected)
    np.testing.assert_array_equal(fast, hm.emulate(a, np.zeros_like(a), stage=0, mode="exact"))


def test_blocks_whose_unrolled_tiles_overlap_stay_in_order():
    func = _tile(4)
    decision = _grid(func)
    assert decision.strategy not in (P.LANES, P.PARALLEL_CHUNKS) and "c" in decision.reason, decision
    a = np.random.default_rng(1).standard_normal(ROWS * COLS + 8).astype(np.float32)
    hm = thn.build(func, target=CUDA)
    np.testing.assert_array_equal(hm.emulate(a, np.zeros_like(a), stage=0, mode="fast"),
                                  hm.emulate(a, np.zeros_like(a), stage=0, mode="exact"))
