"""The dependence test reads a loop whose variable the accesses divide by one constant as two loops.

dlight's GPU softmax over a ``(2, 7, 20)`` tensor stores ``out[bx // 20, tx, bx % 20]``: no index,
nor the row-major number of the tuple, moves by a constant step with ``bx``, so the blocks ran one
after another in fast mode (as slow as exact mode, plus the analysis).  Read as ``bx = q * 20 + r``,
``bx // 20`` separates the blocks of different ``q`` and ``bx % 20`` those of one ``q``.
"""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import plan as P


@T.prim_func
def _quotient_and_remainder_of_the_block(A: T.Buffer((2, 7, 20), "float32"), B: T.Buffer((2, 7, 20), "float32")):
    for bx in T.thread_binding(40, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            if tx < 7:
                B[bx // 20, tx, bx % 20] = A[bx // 20, tx, bx % 20] * T.float32(2) + T.Cast("float32", bx)


@T.prim_func
def _halved_remainder(A: T.Buffer((40,), "float32"), B: T.Buffer((2, 10), "float32")):
    for x in T.serial(40):
        B[x // 20, x % 20 // 2] = B[x // 20, x % 20 // 2] + A[x]  # x = 0 and 1 meet: carried


def test_blocks_indexed_by_quotient_and_remainder_run_as_lanes():
    hm = thn.build(_quotient_and_remainder_of_the_block, target="cuda")
    a = np.random.default_rng(0).standard_normal((2, 7, 20)).astype(np.float32)
    want = a * np.float32(2) + np.arange(40, dtype=np.float32).reshape(2, 20)[:, None, :]
    planned = 0
    for stage in hm.stages[:hm.packed_api_index]:
        grid = [d for d in stage.plan("fast").decisions if d.loop in ("bx", "blockIdx.x")]
        if grid:  # the host function's plan after SplitHostDevice has none
            assert grid[0].strategy in (P.LANES, P.PARALLEL_CHUNKS), f"{stage.label}: {grid[0].reason}"
            planned += 1
        for mode in ("fast", "exact"):
            got = hm.emulate(a, np.zeros_like(a), stage=stage.index, mode=mode)
            np.testing.assert_array_equal(got, want, err_msg=f"{stage.label}, {mode} mode")
    assert planned >= 10


def test_a_remainder_divided_again_keeps_the_loop_serial():
    hm = thn.build(_halved_remainder)
    decision = next(d for d in hm.stage(0).plan("fast").decisions if d.loop == "x")
    assert decision.strategy == P.SERIAL and "carried dependence on B" in decision.reason
    a = np.arange(40, dtype=np.float32)
    want = a.reshape(2, 10, 2).sum(axis=2)
    np.testing.assert_array_equal(hm.emulate(a, np.zeros((2, 10), np.float32), mode="fast"), want)
