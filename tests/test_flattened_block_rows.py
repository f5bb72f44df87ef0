"""A grid's blocks run as lanes when each touches its own row of a flattened buffer through two loops.

TVM's GPU sort (topk, argsort, sort for cuda) copies each block's 128 values of row ``bx`` into shared
memory and back after ``FlattenBuffer``: it reads ``values[bx * 4096 + by * 128 + tx * 2 + v]`` in one
``for v`` loop and writes the same elements in another.  The index is a mixed-radix number of its
terms (``v`` < 2, ``tx`` < 64, ``by`` < 32, ``bx`` < 2), so equal indices have equal terms, and the term
``by`` alone keeps the blocks apart; the two loops' variables differ, which the digit test required to
be the same expression, so the blocks ran one after another (a 2 x 4,096 topk: 2.9 s a stage from
``FlattenBuffer`` on, 0.5 s as lanes).
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import plan as P

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
SIZE = 2 * 4096 + 128  # two rows of 32 blocks x 128, and one more block's room


def _rows(shift: int):
    """Each block reads its 128 values and writes them back swapped in pairs, plus one, ``shift``
    elements further on: its own row for 0; for 128, the next block's row (which that block reads)."""

    @T.prim_func
    def block_rows(a: T.Buffer((SIZE,), "float32")):
        T.func_attr({"global_symbol": "main"})
        for by in T.thread_binding(32, thread="blockIdx.y"):
            for bx in T.thread_binding(2, thread="blockIdx.x"):
                for tx in T.thread_binding(64, thread="threadIdx.x"):
                    t = T.alloc_buffer((2,), "float32", scope="local")
                    for v in range(2):
                        t[v] = a[bx * 4096 + by * 128 + tx * 2 + v]
                    for w in range(2):
                        a[bx * 4096 + by * 128 + tx * 2 + w + shift] = t[1 - w] + T.float32(1)

    return block_rows


def _grid(func) -> P.LoopDecision:
    return next(d for d in thn.build(func, target=CUDA).stage(0).plan("fast").decisions if d.loop == "by")


def test_blocks_touching_their_own_rows_through_two_loops_run_as_lanes():
    func = _rows(0)
    decision = _grid(func)
    assert decision.strategy in (P.LANES, P.PARALLEL_CHUNKS), decision.reason
    a = np.random.default_rng(0).standard_normal(SIZE).astype(np.float32)
    hm = thn.build(func, target=CUDA)
    fast = hm.emulate(a.copy(), stage=0, mode="fast")
    expected = a.copy()
    pairs = expected[:2 * 4096].reshape(-1, 2)
    expected[:2 * 4096] = (pairs[:, ::-1] + np.float32(1)).reshape(-1)
    np.testing.assert_array_equal(fast, expected)
    np.testing.assert_array_equal(fast, hm.emulate(a.copy(), stage=0, mode="exact"))


def test_blocks_writing_the_next_blocks_row_stay_in_order():
    func = _rows(128)
    decision = _grid(func)
    assert decision.strategy not in (P.LANES, P.PARALLEL_CHUNKS) and "a" in decision.reason, decision
    a = np.random.default_rng(1).standard_normal(SIZE).astype(np.float32)
    hm = thn.build(func, target=CUDA)
    np.testing.assert_array_equal(hm.emulate(a.copy(), stage=0, mode="fast"),
                                  hm.emulate(a.copy(), stage=0, mode="exact"))
