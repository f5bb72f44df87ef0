"""TVM's GPU top-k merges its sorted runs with the blocks of each level as lanes.

``topi``'s GPU sort (behind ``topk``, ``sort`` and ``argsort`` for cuda) merges runs of ``2 << v + 7``
values at level ``v``, one grid per level: ``31999 // (2 << v + 7) + 1`` blocks per row for a row of
32,000, a branch for levels wider than 4,096 (a ``blockIdx.z`` of its own, whose loops are bounded by
values read from memory), and the values and swap buffers trading roles by ``v % 2``.  The blocks of a
level are proven apart for each value of ``v`` (the grid's extent, and its threads', change with it),
the accesses under a branch that a value of ``v`` makes false are left out, the two roles are tested
apart, and the blocks then run as lanes through their threads' while loops and memory-bounded loops.
The rows (``blockIdx.x``) too: a block's last run ``v < min(min(end, start + run) - start - tx * step,
step)`` keeps ``start + tx * step + v`` below the row's end.  A row of 4,100 values takes the wide
branch at its last level.
"""
from __future__ import annotations

import numpy as np
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec

from tvm_hybrid_nb import module as hmodule, zoo
from tvm_hybrid_nb.codegen import plan as P

ROWS, WIDTH, K = 2, 4100, 5


class _TopK(nn.Module):
    def forward(self, x):
        return op.topk(x, k=K, axis=-1, ret_type="both", largest=True)


def test_the_blocks_of_each_merge_level_run_as_lanes_and_the_top_k_is_exact():
    kernel = next(k for k in zoo.collect_kernels([("topk", _TopK(), {"x": spec.Tensor((ROWS, WIDTH), "float32")})])
                  if k.name == "topk.topk" and k.cuda is not None)
    target, mod = zoo.schedule(kernel.cuda, "dlight-gpu")
    hm = hmodule.build(mod, target=target)
    stage = next(s for s in hm.stages if s.label.endswith("FlattenBuffer"))
    grids = [d for d in stage.plan("fast").decisions
             if d.loop in ("blockIdx.x", "blockIdx.y") and d.reason != "a loop of one iteration"]  # the copy out
    assert len(grids) >= 6 and all(d.strategy in (P.LANES, P.PARALLEL_CHUNKS) for d in grids), \
        [(d.loop, d.strategy, d.reason) for d in grids]
    x = np.random.default_rng(0).standard_normal((ROWS, WIDTH)).astype(np.float32)
    values, indices = hm.emulate(x, np.zeros((ROWS, K), np.float32), np.zeros((ROWS, K), np.int32),
                                 stage=stage.index, mode="fast")
    order = np.argsort(-x, axis=1, kind="stable")[:, :K]
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=1))
