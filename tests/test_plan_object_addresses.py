"""The planner's decisions never depend on where TVM objects happen to live in memory.

The code generator keys what it learns about an IR object by the object's address.  The loop the
planner makes for a GPU grid (``grid_loop``: a ``For`` over ``blockIdx``) lives only while its
``thread_extent`` is planned; freed, its address went to the next grid's loop, and the dependence
cache answered for that grid with the freed one's accesses.  In the zoo's GPU sort kernels the
merge grid was so read as the independent copy grid's (or the other way round): two builds of one
stage in one process planned a grid as lanes in one and serially in the other (2 builds in 25), and
the reverse, a grid with a carried dependence taken for an independent one, is a wrong answer.
Ties of buffer names (StorageRewrite names every merged allocation ``v``) were broken by address
too, so the copies' numbering moved between processes.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.codegen.analysis import grid_loop
from tvm_hybrid_nb.codegen.dependence import loop_dependences
from tvm_hybrid_nb.zoo_models import models


@T.prim_func
def two_grids(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32"), C: T.Buffer((1,), "float32")):
    with T.launch_thread("blockIdx.x", 8) as bx:  # each block its own element: independent
        B[bx] = A[bx] * T.float32(2)
    with T.launch_thread("blockIdx.x", 8) as by:  # every block adds into C[0]: a carried dependence
        C[0] = C[0] + B[by]


def test_a_freed_grid_loop_never_answers_for_the_next_grid():
    grids = list(two_grids.body.seq)
    cache: dict = {}
    for trial in range(60):
        loop = grid_loop(grids[trial % 2])  # made, asked about, freed: as the planner does
        assert loop_dependences(loop, {}, cache=cache) == loop_dependences(loop, {}), trial
        del loop
    loop = grid_loop(grids[1])
    blocking, shared = loop_dependences(loop, {}, cache=cache)
    assert blocking is None and [why.split(":")[0] for why in shared.values()] == ["carried dependence on C"]


def test_two_grids_emulate_as_numpy_adds():
    a = np.arange(8, dtype=np.float32)
    hm = thn.build(two_grids.with_attr("target", tvm.target.Target("cuda")), target="cuda")
    for mode in ("fast", "exact"):
        b, c = np.zeros(8, np.float32), np.zeros(1, np.float32)
        hm.emulate(a, b, c, stage=0, mode=mode)
        np.testing.assert_array_equal(b, a * 2)
        assert c[0] == np.float32(a.sum() * 2)


def test_the_gpu_sort_kernel_plans_alike_whatever_the_process_did_before():
    (kernel,) = [k for k in zoo.collect_kernels([m for m in models() if m[0] == "sortmore"])
                 if k.name == "sortmore.sort" and k.cuda is not None]
    labels = ("21 NarrowDataType", "26 StorageRewrite")
    scripts: dict[str, set] = {label: set() for label in labels}
    kept = []
    for trial in range(8):
        target, mod = zoo.schedule(kernel.cuda, "dlight-gpu")
        hm = thn.build(mod, target=target)
        for stage in hm.stages:
            if stage.label in labels:
                scripts[stage.label].add(stage.kernel("fast", True).source)
        kept.append([tvm.tirx.Var(f"v{i}", "int32") for i in range(29 * trial)])  # moves the allocator on
        kept.append(grid_loop(next(iter(two_grids.body.seq))))
    assert all(len(found) == 1 for found in scripts.values()), {k: len(v) for k, v in scripts.items()}
