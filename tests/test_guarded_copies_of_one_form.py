"""A block's run copied in and out through loops of its own, under guards of the same form.

TVM's GPU sort (``topi.gpu.sort``, dlight's topk/sort/argsort kernels) sorts each run of 128 in
shared memory: ``for v in range(2)`` copies the run in under ``2 * tx + v + by * 128 < 300`` and a
second ``for v in range(2)`` copies it out under the same guard over its own ``v``, at
``a[(bx * 300 + 2 * tx + v + by * 128) // 300, ... % 300]`` with the row loop ``bx`` inside the run
loop ``by``.  Each access's guard makes its ``e // 128`` the run, and the two accesses are one form
over loops of equal range: the runs touch their own elements and run as lanes.  Before, the test
compared the two accesses' guards and rests as expressions, found two different ``v``, and ran the
runs one after another (half of the sort's run time at every stage before ``FlattenBuffer``).
"""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import plan as P


def _runs(reverse: int, scale: float, bound: int, shift: int):
    """Runs of 128 of each row of ``a`` (3 x 300) copied into a tile and back, at the run's start
    plus ``shift`` under ``... < bound``, as ``tile[...] * scale + 1`` (the tile reversed or not)."""

    @T.prim_func
    def runs(a: T.Buffer((3, 300), "float32")):
        for by in range(3):
            for bx in range(3):
                tile = T.alloc_buffer((128,), "float32")
                for tx in range(64):
                    for v in range(2):
                        if 2 * tx + v + by * 128 < 300:
                            tile[2 * tx + v] = a[(bx * 300 + 2 * tx + v + by * 128) // 300,
                                                 (bx * 300 + 2 * tx + v + by * 128) % 300]
                for tx in range(64):
                    for v in range(2):
                        if 2 * tx + v + by * 128 < bound:
                            a[(bx * 300 + 2 * tx + v + by * 128 + shift) // 300,
                              (bx * 300 + 2 * tx + v + by * 128 + shift) % 300] = \
                                tile[reverse * 127 + (1 - 2 * reverse) * (2 * tx + v)] * scale + T.float32(1)

    return runs


def _expected(a, reverse: int, scale: float, bound: int, shift: int):
    out = a.copy()
    for by in range(3):
        for bx in range(3):
            tile = np.zeros(128, "float32")
            for i in range(128):
                if i + by * 128 < 300:
                    tile[i] = out[bx, i + by * 128]
            for i in range(128):
                if i + by * 128 < bound:
                    out[bx, i + by * 128 + shift] = tile[127 - i if reverse else i] * np.float32(scale) + np.float32(1)
    return out


#: Each run reversed in place, and each run written one element on, into the next run's first.
COPIED = dict(reverse=1, scale=2.0, bound=300, shift=0)
SHIFTED = dict(reverse=0, scale=1.0, bound=299, shift=1)


def _decision(hm, loop):
    return next(d for d in hm.stage(0).plan("fast").decisions if d.loop == loop)


def test_runs_copied_through_loops_of_their_own_run_as_lanes_and_match_numpy():
    hm = thn.build(_runs(**COPIED), target="llvm")
    by = _decision(hm, "by")
    assert by.strategy == P.LANES, by.text()
    a = np.random.default_rng(0).standard_normal((3, 300)).astype("float32")
    for mode in ("fast", "exact"):
        got = a.copy()
        hm.emulate(got, mode=mode)
        np.testing.assert_array_equal(got, _expected(a, **COPIED))


def test_a_run_that_writes_into_the_next_one_stays_serial_and_matches_numpy():
    hm = thn.build(_runs(**SHIFTED), target="llvm")
    by = _decision(hm, "by")
    assert by.strategy == P.SERIAL and "carried dependence on a" in by.reason, by.text()
    a = np.random.default_rng(1).standard_normal((3, 300)).astype("float32")
    got = a.copy()
    hm.emulate(got, mode="fast")
    np.testing.assert_array_equal(got, _expected(a, **SHIFTED))
