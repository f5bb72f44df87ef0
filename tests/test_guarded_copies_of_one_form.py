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


@T.prim_func
def runs_copied_in_and_out(a: T.Buffer((3, 300), "float32")):
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
                    if 2 * tx + v + by * 128 < 300:
                        a[(bx * 300 + 2 * tx + v + by * 128) // 300,
                          (bx * 300 + 2 * tx + v + by * 128) % 300] = tile[127 - 2 * tx - v] * 2.0 + 1.0


@T.prim_func
def runs_written_one_past_their_end(a: T.Buffer((3, 300), "float32")):
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
                    if 2 * tx + v + by * 128 < 299:  # the next run's first element too
                        a[(bx * 300 + 2 * tx + v + by * 128 + 1) // 300,
                          (bx * 300 + 2 * tx + v + by * 128 + 1) % 300] = tile[2 * tx + v] + 1.0


def _expected_copied(a):
    out = a.copy()
    for by in range(3):
        for bx in range(3):
            tile = np.zeros(128, "float32")
            for i in range(128):
                if i + by * 128 < 300:
                    tile[i] = out[bx, i + by * 128]
            for i in range(128):
                if i + by * 128 < 300:
                    out[bx, i + by * 128] = tile[127 - i] * np.float32(2) + np.float32(1)
    return out


def _expected_shifted(a):
    out = a.copy()
    for by in range(3):
        for bx in range(3):
            tile = np.zeros(128, "float32")
            for i in range(128):
                if i + by * 128 < 300:
                    tile[i] = out[bx, i + by * 128]
            for i in range(128):
                if i + by * 128 < 299:
                    out[bx, i + by * 128 + 1] = tile[i] + np.float32(1)
    return out


def _decision(hm, loop):
    return next(d for d in hm.stage(0).plan("fast").decisions if d.loop == loop)


def test_runs_copied_through_loops_of_their_own_run_as_lanes_and_match_numpy():
    hm = thn.build(runs_copied_in_and_out, target="llvm")
    by = _decision(hm, "by")
    assert by.strategy == P.LANES, by.text()
    a = np.random.default_rng(0).standard_normal((3, 300)).astype("float32")
    for mode in ("fast", "exact"):
        got = a.copy()
        hm.emulate(got, mode=mode)
        np.testing.assert_array_equal(got, _expected_copied(a))


def test_a_run_that_writes_into_the_next_one_stays_serial_and_matches_numpy():
    hm = thn.build(runs_written_one_past_their_end, target="llvm")
    by = _decision(hm, "by")
    assert by.strategy == P.SERIAL and "carried dependence on a" in by.reason, by.text()
    a = np.random.default_rng(1).standard_normal((3, 300)).astype("float32")
    got = a.copy()
    hm.emulate(got, mode="fast")
    np.testing.assert_array_equal(got, _expected_shifted(a))
