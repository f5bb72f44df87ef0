"""The dependence test reads a guard that bounds the block's own index expression.

dlight's GPU matmul (the Whisper front's conv1d, 80 -> 128 channels over 1,000 frames) stores its
output after ``FlattenBuffer`` at ``row * 1000 + (bx * 8 + tx) * 4 + a`` under ``bx * 8 + tx < 250``.
Over the 32 blocks ``(bx * 8 + tx) * 4 + a`` runs to 1,023, into the next row, so the blocks ran one
after another at every stage from ``FlattenBuffer`` on (4-5 s a stage under check=True, against
0.3 s before it).  Under the guard ``e = bx * 8 + tx`` stays below 250, and ``e`` tells ``bx``
(``tx`` < 8): distinct blocks have distinct ``e``, and the index, a mixed-radix number of ``e``, the
row and ``a``, distinct elements.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import plan as P
from tvm_hybrid_nb.errors import EmulationError


def _guarded_rows(bound: int, unrolled: bool = False):
    """Rows of 1,000 in blocks of 8 threads x 4 elements, under ``bx * 8 + tx < bound``; each row ``r``
    gets the value ``r + 1``: past 250 the rows' elements meet, and the last write decides.
    ``unrolled``: ``UnrollLoop`` then leaves copies at constant offsets 0-3, 1,000-1,003."""
    loop = T.unroll if unrolled else T.serial

    @T.prim_func
    def guarded_rows(A: T.Buffer((2000,), "float32"), B: T.Buffer((2012,), "float32")):
        bx = T.launch_thread("blockIdx.x", 32)
        tx = T.launch_thread("threadIdx.x", 8)
        for r in loop(2):
            for a in loop(4):
                if bx * 8 + tx < bound:
                    B[r * 1000 + (bx * 8 + tx) * 4 + a] = A[(bx * 8 + tx) * 4 % 1000 + a] + T.Cast("float32", r + 1)

    return guarded_rows


def _serially(a: np.ndarray, bound: int) -> np.ndarray:
    b = np.zeros(2012, "float32")
    for bx in range(32):
        for tx in range(8):
            for r in range(2):
                for k in range(4):
                    e = bx * 8 + tx
                    if e < bound:
                        b[r * 1000 + e * 4 + k] = a[e * 4 % 1000 + k] + np.float32(r + 1)
    return b


def _grid_decisions(hm) -> dict:
    """The block loop's decision at each changed stage before MakePackedAPI (in the launched kernel
    after SplitHostDevice)."""
    found = {}
    for stage in hm.stages[:hm.packed_api_index]:
        if not (stage.changed and stage.emulatable):
            continue
        plan = stage.plan("fast")
        for sub in [plan, *plan.launched.values()]:
            for decision in sub.decisions:
                if decision.loop in ("bx", "blockIdx.x"):
                    found[stage.label] = decision
    return found


@pytest.mark.parametrize("unrolled", [False, True])
@pytest.mark.parametrize("bound", [250, 251])
def test_a_guard_bounding_the_blocks_index_keeps_them_apart(bound, unrolled):
    hm = thn.build(_guarded_rows(bound, unrolled), target="cuda")
    grids = _grid_decisions(hm)
    assert len(grids) > 5 and (any("UnrollLoop" in label for label in grids) or not unrolled), list(grids)
    for label, grid in grids.items():
        if bound == 250:
            assert grid.strategy in (P.LANES, P.PARALLEL_CHUNKS), (label, grid)
        else:  # bx = 31, tx = 2 writes row 0's elements 1,000-1,003, which are row 1's first
            assert grid.strategy in (P.BLOCK_LOOP, P.SERIAL) and "carried dependence on B" in grid.reason, (label, grid)
    a = np.random.default_rng(0).standard_normal(2000).astype(np.float32)
    want = _serially(a, bound)
    for stage in (0, "UnrollLoop", hm.packed_api_index - 1):
        for mode, check in (("fast", False), ("exact", False), ("fast", True)):
            if bound == 251 and check:  # two blocks of one launch write B[1000] differently: a race
                with pytest.raises(EmulationError, match=r"data race on B"):
                    hm.emulate(a, np.zeros(2012, "float32"), stage=stage, mode=mode, check=check)
                continue
            got = hm.emulate(a, np.zeros(2012, "float32"), stage=stage, mode=mode, check=check)
            np.testing.assert_array_equal(got, want, err_msg=f"{stage} {mode} check={check}")
