"""TVM's GPU scan (``topi.gpu.scan``, behind ``cumsum`` and ``cumprod`` for cuda) runs its blocks as lanes.

Each level ``v`` of the up- and down-sweeps is a grid of ``ceil(n / (1024 * (2 << v)))`` blocks per row,
launched inside ``threadIdx.x``, and each thread keeps where its pair starts and ends in one-element
local buffers that index the output: ``out[(bx // K) * n + end[0] - 1]`` with ``end[0] = min(start[0] +
(2 << v), n)``, under ``start[0] < n`` and ``mid[0] < n``.  Every block touches its own row: the
dependence test reads the local scalars as the values stored in them, fixes ``v`` (then ``K`` is 1),
ranges the threads within each block and bounds each access under its guards.  Before, every level
ran its 2,056 blocks one after another (an exclusive cumsum over (8, 128, 257): 10-19 s a stage).
"""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn.core import wrap_nested

from tvm_hybrid_nb import module as hmodule
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.codegen import plan as P


class ExclusiveCumsum(nn.Module):
    def forward(self, x):
        return wrap_nested(relax.op.cumsum(x._expr, axis=1, exclusive=True), "excl")


def _scan_module():
    spec = {"x": nn.spec.Tensor((3, 128, 5), "float32")}
    (kernel,) = [k for k in zoo.collect_kernels([("scan", ExclusiveCumsum(), spec)]) if k.cuda is not None]
    target, mod = zoo.schedule(kernel.cuda, "dlight-gpu")
    return hmodule.build(mod, target=target)


def test_the_sweep_grids_of_tvms_gpu_scan_run_their_blocks_as_lanes():
    """At stage 0 and after ``CommonSubexprElim``, whose lets before each grid hold its size
    (``cse_v4 = 127 // ((2 << v) * 1024)``): the planner passes them to the test."""
    hm = _scan_module()
    x = np.random.default_rng(0).standard_normal((3, 128, 5)).astype(np.float32)
    want = np.cumsum(x, axis=1, dtype=np.float64) - x
    cse = next(s.index for s in hm.stages if s.label.endswith("CommonSubexprElim"))
    for index in (0, cse):
        grids = [d for d in hm.stage(index).plan("fast").decisions if d.loop == "blockIdx.x"]
        assert len(grids) >= 4 and all(d.strategy != P.BLOCK_LOOP for d in grids), [d.reason for d in grids]
        fast = hm.emulate(x, np.zeros_like(x), stage=index, mode="fast")
        np.testing.assert_array_equal(fast, hm.emulate(x, np.zeros_like(x), stage=index, mode="exact"))
        np.testing.assert_allclose(fast, want, rtol=1e-4, atol=1e-4)


from tvm.script import tirx as T  # noqa: E402

import tvm_hybrid_nb as thn  # noqa: E402


def rows_through_a_local_scalar(stored_on_every_row: bool = True):
    """Each row's start stored in a one-element local buffer, then read as an index; without
    ``stored_on_every_row``, only even rows store it (odd ones read their fresh buffer)."""

    @T.prim_func
    def rows(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (32,), "float32")
        B = T.match_buffer(b, (32,), "float32")
        for i in range(8):
            start = T.alloc_buffer((1,), "int32", scope="local")
            if stored_on_every_row:
                start[0] = i * 4
            elif i % 2 == 0:
                start[0] = i * 4
            for k in range(4):
                B[start[0] + k] = A[start[0] + k] * T.float32(2.0)

    return rows


def _strategy(func, loop: str) -> str:
    return next(d.strategy for d in thn.build(func).stage(0).plan("fast").decisions if d.loop == loop)


def test_a_one_element_buffer_stored_once_before_its_loads_is_read_as_its_value():
    assert _strategy(rows_through_a_local_scalar(), "i") == P.LANES  # B[i * 4 + k]: rows apart
    hm = thn.build(rows_through_a_local_scalar())
    x = np.arange(32, dtype=np.float32)
    np.testing.assert_array_equal(hm.emulate(x, np.zeros(32, np.float32), mode="fast"), 2 * x)


def test_a_store_that_a_load_may_not_follow_is_not_read_through():
    # Odd iterations read whatever their fresh scalar holds: no claim about where they write.
    assert _strategy(rows_through_a_local_scalar(stored_on_every_row=False), "i") == P.SERIAL


@T.prim_func
def blocks_meeting_through_threads_launched_around_them(b: T.handle):
    B = T.match_buffer(b, (10,), "float32")
    tx = T.launch_thread("threadIdx.x", 2)
    bx = T.launch_thread("blockIdx.x", 8)
    B[bx + tx] = B[bx + tx] + T.float32(1.0)  # thread 1 of block b is thread 0 of block b + 1


def test_threads_launched_around_a_grid_range_within_each_block():
    """Every thread runs each block: ranged within the block, thread 1 of block 0 and thread 0 of
    block 1 touch one element, so the blocks stay one after another.  The test took a thread
    launched around the grid for a fixed value (``bx + tx`` moves by 1 with ``bx``, spread 0):
    fast mode ran the blocks as lanes, each adding 1 to what it read before any block wrote, and
    differed from the exact run (which adds 2 where blocks meet; on a GPU this is a race)."""
    hm = thn.build(blocks_meeting_through_threads_launched_around_them, target="cuda")
    grid = next(d for d in hm.stage(0).plan("fast").decisions if d.loop == "bx")
    assert grid.strategy == P.BLOCK_LOOP and "carried dependence on B" in grid.reason
    fast = hm.emulate(np.zeros(10, np.float32), stage=0, mode="fast")
    np.testing.assert_array_equal(fast, hm.emulate(np.zeros(10, np.float32), stage=0, mode="exact"))
    np.testing.assert_array_equal(fast, [1, 2, 2, 2, 2, 2, 2, 2, 1, 0])
