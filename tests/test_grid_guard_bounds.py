"""A grid's blocks run as lanes when a guard over a block index of one value bounds the threads.

TVM's GPU topk/sort (``topi.gpu.sort``, ``ir_builder``) copies each column into a row of a work buffer
in a grid launched inside ``threadIdx.x`` (1,024 threads) with ``blockIdx.y`` of one block around
``blockIdx.x``: ``values_buf[(bx % 1000 * 64 + (by * 1024 + tx) + bx // 1000) // 64, ...]`` under
``by * 1024 + tx < 64``.  Each block writes its own row only because the guard keeps ``tx`` under 64,
and that reads only once ``by`` is known to be 0.  Before, the dependence test held ``by`` unbounded
(an attribute-launched block index was not an open loop for the grids inside it) and took the guard
as it stood (the constraint scope does not substitute a variable of one value): the grid ran its
1,000 blocks one after another; a topk of 3 over (64, 1,000) under dlight-gpu took 26 s a stage
until StmtSimplify (0.5 s after), 93 s in the zoo's walk.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import plan as P

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})


@T.prim_func
def launched_blocks(x: T.Buffer((T.int64(64), T.int64(100)), "float32"),
                    vb: T.Buffer((T.int64(100), T.int64(64)), "float32")):
    T.func_attr({"global_symbol": "main"})
    with T.launch_thread("threadIdx.x", T.int64(1024)) as tx:
        by = T.launch_thread("blockIdx.y", T.int64(1))
        bx = T.launch_thread("blockIdx.x", T.int64(100))
        if by * T.int64(1024) + tx < T.int64(64):
            vb[(bx % T.int64(100) * T.int64(64) + (by * T.int64(1024) + tx) + bx // T.int64(100)) // T.int64(64),
               (bx % T.int64(100) * T.int64(64) + (by * T.int64(1024) + tx) + bx // T.int64(100)) % T.int64(64)] = (
                x[(bx % T.int64(100) * T.int64(64) + (by * T.int64(1024) + tx) + bx // T.int64(100)) % T.int64(64),
                  (bx % T.int64(100) * T.int64(64) + (by * T.int64(1024) + tx) + bx // T.int64(100)) // T.int64(64)])


def _guarded_blocks(threads_kept: int):
    """The grid bound to loops, its guard keeping ``threads_kept`` threads of each block: 64 keep each
    block in its row; 65 let each block's last thread write the next row."""

    @T.prim_func
    def guarded_blocks(x: T.Buffer((T.int64(64), T.int64(100)), "float32"),
                       vb: T.Buffer((T.int64(100), T.int64(64)), "float32")):
        T.func_attr({"global_symbol": "main"})
        for tx in T.thread_binding(T.int64(1024), thread="threadIdx.x"):
            for by in T.thread_binding(T.int64(1), thread="blockIdx.y"):
                for bx in T.thread_binding(T.int64(100), thread="blockIdx.x"):
                    if by * T.int64(1024) + tx < T.int64(threads_kept) and bx * T.int64(64) + tx < T.int64(6400):
                        vb[(bx * T.int64(64) + (by * T.int64(1024) + tx)) // T.int64(64),
                           (bx * T.int64(64) + (by * T.int64(1024) + tx)) % T.int64(64)] = x[tx % T.int64(64), bx]

    return guarded_blocks


def _grid(func) -> P.LoopDecision:
    return next(d for d in thn.build(func, target=CUDA).stage(0).plan("fast").decisions if d.loop == "bx")


def test_a_guard_over_a_block_index_of_one_value_keeps_the_blocks_apart():
    x = np.random.default_rng(0).standard_normal((64, 100)).astype(np.float32)
    for func in (launched_blocks, _guarded_blocks(64)):
        assert _grid(func).strategy == P.LANES, _grid(func).reason
        hm = thn.build(func, target=CUDA)
        fast = hm.emulate(x, np.zeros((100, 64), np.float32), stage=0, mode="fast")
        np.testing.assert_array_equal(fast, x.T)
        np.testing.assert_array_equal(fast, hm.emulate(x, np.zeros((100, 64), np.float32), stage=0, mode="exact"))


def test_a_guard_that_lets_a_block_reach_the_next_row_keeps_them_in_order():
    decision = _grid(_guarded_blocks(65))
    assert decision.strategy != P.LANES and "vb" in decision.reason
