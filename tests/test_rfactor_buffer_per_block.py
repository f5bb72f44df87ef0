"""The rfactor buffer of a dlight GPU reduction, before ``CompactBufferAllocation``, as one copy for all blocks.

dlight's GPU rules reduce a pooling window across ``threadIdx.x`` through an rfactor buffer
``rf[tx, v0, v1, v2]`` of the whole output's shape, written in one ``threadIdx.x`` loop and read in
another (each with its own thread variable) until ``LiftThreadBinding``.  ``(v0, v1, v2)`` is the
block, so blocks touch different elements, but every number made of the whole index tuple led by
the other loop's thread, and the dependence test found that two blocks may touch one element: a copy
per block lane was planned, refused for its size at real shapes (256 GiB for a 2 x 2 average pool
of 64 channels on 64 x 64) and the 65,536 blocks ran one after another (about 30 s a stage, 103 s
the kernel; 1.3 s now).
"""
from __future__ import annotations

import numpy as np
from tvm import te, topi

from tvm_hybrid_nb import module as hmodule
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.codegen import cost as C
from tvm_hybrid_nb.codegen import plan as P


def test_blocks_touching_their_own_rfactor_elements_share_one_copy_before_thread_binding_is_lifted(monkeypatch):
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", False)  # plan the lanes even for this small pool
    x = te.placeholder((1, 8, 16, 16), "float32", name="x")
    y = topi.nn.pool2d(x, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "avg", layout="NCHW")
    func = te.create_prim_func([x, y]).with_attr("global_symbol", "main")
    target, mod = zoo.schedule(func, "dlight-gpu")
    hm = hmodule.build(mod, target=target)
    data = np.random.default_rng(0).standard_normal((1, 8, 16, 16)).astype("float32")
    want = data.reshape(1, 8, 8, 2, 8, 2).mean(axis=(3, 5))
    for stage in ("s_tir.LowerCrossThreadReduction", "s_tir.PlanAndUpdateBufferAllocationLocation",
                  "s_tir.LiftThreadBinding"):
        plan = hm.stage(stage).plan("fast")
        grid = plan.decisions[0]
        assert grid.strategy in (P.LANES, P.PARALLEL_CHUNKS), (stage, grid)
        # No copy per block: allocated outside the grid (at the root block), or inside it.
        assert "pool_sum.rf_local" not in grid.copies, (stage, grid)
        if stage != "s_tir.LowerCrossThreadReduction":
            shared = {a.buffer for a in plan.allocations if "touch their own elements" in a.reason}
            assert "pool_sum.rf_local" in shared, (stage, plan.allocations)
        got = np.zeros((1, 8, 8, 8), "float32")
        hm.emulate(data, got, stage=stage, mode="fast")
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
