"""The blocks of a grid run as lanes through TVM's GPU merge sort: buffers that swap roles between
levels, and a per-thread binary search.

TVM's GPU sort (topk, sort, argsort for cuda) merges sorted runs level by level, each level one grid:
where ``v % 2 == 0`` it reads the values anywhere in a row (the merge path's binary search) and writes
the swap buffer, block by block, and the other way round where not.  The condition holds or fails for
the whole grid, so the reads and writes of one buffer in the two branches never happen in one run of
it.  Each thread's binary search is a while loop whose trips differ between threads and blocks; a GPU
runs the blocks at once, and so may the emulation (only the iterations of a loop keep such a while loop
serial: the longest would set the pace of all).
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import plan as P

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
BLOCKS, THREADS = 4, 8
N = BLOCKS * THREADS


def _ping_pong(branch_on_block: bool):
    """Level 0 gathers ``a`` into ``b`` (plus one), level 1 gathers ``b`` into ``a`` (times two),
    each block writing its own row.  ``branch_on_block``: the branch is the block's parity instead of
    the level's, so one run of the grid both gathers from ``a`` and writes it."""

    @T.prim_func
    def ping_pong(a: T.Buffer((N,), "float32"), b: T.Buffer((N,), "float32"), idx: T.Buffer((N,), "int32")):
        T.func_attr({"global_symbol": "main"})
        for level in range(2):
            for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
                for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                    if (bx if branch_on_block else level) % 2 == 0:
                        b[bx * THREADS + tx] = a[idx[bx * THREADS + tx]] + T.float32(1)
                    else:
                        a[bx * THREADS + tx] = b[idx[bx * THREADS + tx]] * T.float32(2)

    return ping_pong


@T.prim_func
def row_search(s: T.Buffer((N,), "float32"), q: T.Buffer((N,), "float32"), out: T.Buffer((N,), "int32")):
    """Per block, where each of its queries goes in its sorted row (after equal values)."""
    T.func_attr({"global_symbol": "main"})
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            lo = T.alloc_buffer((1,), "int32", scope="local")
            hi = T.alloc_buffer((1,), "int32", scope="local")
            lo[0] = 0
            hi[0] = THREADS
            while lo[0] < hi[0]:
                if s[bx * THREADS + T.shift_right(lo[0] + hi[0], 1)] <= q[bx * THREADS + tx]:
                    lo[0] = T.shift_right(lo[0] + hi[0], 1) + 1
                else:
                    hi[0] = T.shift_right(lo[0] + hi[0], 1)
            out[bx * THREADS + tx] = lo[0]


def _grid(func, loop: str = "bx") -> P.LoopDecision:
    return next(d for d in thn.build(func, target=CUDA).stage(0).plan("fast").decisions if d.loop == loop)


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32),
            rng.integers(0, N, N).astype(np.int32))


def test_blocks_of_a_level_whose_branch_swaps_the_buffers_run_as_lanes():
    func = _ping_pong(branch_on_block=False)
    decision = _grid(func)
    assert decision.strategy in (P.LANES, P.PARALLEL_CHUNKS), decision.reason
    a, b, idx = _inputs(0)
    hm = thn.build(func, target=CUDA)
    fast_a, fast_b = hm.emulate(a.copy(), b.copy(), idx, stage=0, mode="fast")
    want_b = a[idx] + np.float32(1)
    want_a = want_b[idx] * np.float32(2)
    np.testing.assert_array_equal(fast_b, want_b)
    np.testing.assert_array_equal(fast_a, want_a)
    for got, want in zip(hm.emulate(a.copy(), b.copy(), idx, stage=0, mode="exact"), (fast_a, fast_b)):
        np.testing.assert_array_equal(got, want)


def test_blocks_that_branch_on_their_own_index_stay_in_order():
    func = _ping_pong(branch_on_block=True)
    decision = _grid(func)
    assert decision.strategy not in (P.LANES, P.PARALLEL_CHUNKS), decision.reason
    a, b, idx = _inputs(1)
    hm = thn.build(func, target=CUDA)
    for got, want in zip(hm.emulate(a.copy(), b.copy(), idx, stage=0, mode="fast"),
                         hm.emulate(a.copy(), b.copy(), idx, stage=0, mode="exact")):
        np.testing.assert_array_equal(got, want)


def test_blocks_whose_threads_search_in_a_while_loop_run_as_lanes():
    decision = _grid(row_search)
    assert decision.strategy in (P.LANES, P.PARALLEL_CHUNKS), decision.reason
    rng = np.random.default_rng(2)
    s = np.sort(rng.integers(0, 6, (BLOCKS, THREADS)), axis=1).astype(np.float32).reshape(-1)
    q = rng.integers(-1, 7, N).astype(np.float32)
    hm = thn.build(row_search, target=CUDA)
    out = hm.emulate(s, q, np.zeros(N, np.int32), stage=0, mode="fast")
    want = np.concatenate([np.searchsorted(s.reshape(BLOCKS, -1)[r], q.reshape(BLOCKS, -1)[r], side="right")
                           for r in range(BLOCKS)])
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(out, hm.emulate(s, q, np.zeros(N, np.int32), stage=0, mode="exact"))
