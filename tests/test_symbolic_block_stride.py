"""Fast mode: GPU blocks that each own a row of a symbolic length run as lanes at every stage.

After ``FlattenBuffer`` a dlight row kernel over ``(n, m)`` indexes ``A[blockIdx.x * m + k * 256 +
threadIdx.x]`` under the guard ``k * 256 + threadIdx.x < m``: the step between blocks is ``m``, known
only at run time, and the guard keeps each block inside its own row.  The dependence test proves that
symbolically; a guard that lets a block reach into the next row keeps the blocks serial.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm import te, tirx, topi
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.codegen import plan as P

_BUILT: dict = {}


def _softmax_over_symbolic_rows():
    if "softmax" not in _BUILT:
        n, m = tirx.Var("n", "int64"), tirx.Var("m", "int64")
        a = te.placeholder((n, m), "float32", name="A")
        func = te.create_prim_func([a, topi.nn.softmax(a, axis=1)]).with_attr("global_symbol", "main")
        _target, mod = zoo.schedule(func, "dlight-gpu")
        _BUILT["softmax"] = thn.build(mod["main"], target="cuda")
    return _BUILT["softmax"]


def _block_decisions(plan):
    decisions = [d for d in plan.decisions if d.kind == "thread_binding" or d.loop.startswith("blockIdx")]
    for sub in plan.launched.values():
        decisions += _block_decisions(sub)
    return [d for d in decisions if d.strategy not in (P.THREAD_LANES, P.SAME_THREADS)]


def test_blocks_owning_rows_of_a_symbolic_length_run_as_lanes_at_every_stage():
    hm = _softmax_over_symbolic_rows()
    stages = [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]
    flattened = [s for s in stages if s.index >= hm.stage("tirx.FlattenBuffer").index]
    assert len(flattened) > 5
    for stage in flattened:
        blocks = _block_decisions(stage.plan("fast"))
        assert blocks and all(d.strategy in (P.PARALLEL_CHUNKS, P.LANES) for d in blocks), (
            stage.label, [(d.loop, d.strategy, d.reason) for d in blocks])
    rng = np.random.default_rng(0)
    for rows, cols in ((3, 1), (5, 300), (2, 512)):
        a = rng.standard_normal((rows, cols)).astype(np.float32)
        want = np.exp(a - a.max(1, keepdims=True))
        want /= want.sum(1, keepdims=True)
        for stage in stages:
            out = hm.emulate(a, np.zeros_like(a), stage=stage.index, mode="fast")
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6, err_msg=f"{stage.label} {rows}x{cols}")
            np.testing.assert_array_equal(out, hm.emulate(a, np.zeros_like(a), stage=stage.index, mode="exact"))


@T.prim_func(s_tir=True)
def _rows_one_too_long(a: T.handle, b: T.handle, n: T.int64, m: T.int64):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    A = T.match_buffer(a, (n * m + 1,), "float32")
    B = T.match_buffer(b, (n * m + 1,), "float32")
    for bx in T.thread_binding(n, thread="blockIdx.x"):
        for tx in T.thread_binding(T.int64(4), thread="threadIdx.x"):
            for k in range((m + T.int64(4)) // T.int64(4)):
                with T.sblock("copy"):
                    vb = T.axis.spatial(n, bx)
                    v = T.axis.spatial(n * m + 1, bx * m + k * T.int64(4) + tx)
                    T.where(k * T.int64(4) + tx < m + T.int64(1))  # one element into the next row
                    B[v] = A[v] + T.Cast("float32", vb)


@pytest.mark.parametrize("stage_name", ["input", "tirx.FlattenBuffer"])
def test_blocks_whose_guard_reaches_into_the_next_row_stay_serial_and_exact(stage_name):
    hm = thn.build(_rows_one_too_long, target="cuda")
    stage = hm.stage(0) if stage_name == "input" else hm.stage(stage_name)
    blocks = _block_decisions(stage.plan("fast"))
    assert blocks and all(d.strategy in (P.SERIAL, P.BLOCK_LOOP) for d in blocks), [(d.loop, d.strategy) for d in blocks]
    assert any("carried dependence on B" in d.reason for d in blocks)
    n, m = 4, 6
    a = np.arange(n * m + 1, dtype=np.float32)
    want = a.copy()
    for bx in range(n):  # the blocks one after another: the next block overwrites the shared element
        want[bx * m:bx * m + m + 1] = a[bx * m:bx * m + m + 1] + bx
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, a.copy(), n, m, stage=stage.index, mode=mode), want)
