"""A cross-thread reduction into per-thread memory inside a grid that runs in chunks on several cores.

dlight's GEMV rule reduces a decode step's attention scores (16 heads of 64 over 256 cached
positions, ``* 0.125 + mask`` fused after) with an rfactor over ``threadIdx.y`` into a ``local``
accumulator.  After the reduction every thread holds the result: the accumulator's thread-0 copy
was copied to every thread's copy with one statement over the whole buffer, the elements of all
blocks.  With the grid's blocks in two chunks on two cores, one chunk's copy wrote back a snapshot
of the other chunk's accumulators while that chunk was still adding to them: heads 8 to 15 wrong
(by up to 2.0), differently from run to run, in fast mode only.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import te

from tvm_hybrid_nb import module as hmodule
from tvm_hybrid_nb import zoo


def _scores(heads=16, dim=64, length=256):
    q = te.placeholder((1, heads, 1, dim), "float32", name="q")
    k = te.placeholder((1, heads, dim, length), "float32", name="k")
    mask = te.placeholder((1, length), "float32", name="mask")
    r = te.reduce_axis((0, dim), name="r")
    mm = te.compute((1, heads, 1, length), lambda a, h, i, j: te.sum(q[a, h, i, r] * k[a, h, r, j], axis=r),
                    name="matmul")
    out = te.compute((1, heads, 1, length), lambda a, h, i, j: mm[a, h, i, j] * tvm.tirx.const(0.125, "float32")
                     + mask[0, j], name="T_add")
    return te.create_prim_func([q, k, mask, out]).with_attr("global_symbol", "main")


def _inputs(heads=16, dim=64, length=256):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype("float32") for s in ((1, heads, 1, dim), (1, heads, dim, length),
                                                                (1, length))]


def _check(hm, func, runs=3):
    q, k, mask = _inputs()
    want = np.zeros((1, 16, 1, 256), "float32")
    hmodule.build(func).run_native(q, k, mask, want)
    np.testing.assert_allclose(want[0, :, 0], np.einsum("hr,hrj->hj", q[0, :, 0], k[0]) * 0.125 + mask, rtol=1e-4,
                               atol=1e-5)
    for _ in range(runs):  # the race gave different results from run to run
        got = np.zeros_like(want)
        hm.emulate(q, k, mask, got, stage=0, mode="fast")
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_each_stored_element_is_shared_with_the_other_threads_not_the_whole_buffer(monkeypatch):
    monkeypatch.setenv("TVM_HYBRID_NB_THREADS", "2")
    func = _scores()
    target, mod = zoo.schedule(func, "dlight-gpu")
    hm = hmodule.build(mod, target=target)
    source = hm.stage(0).kernel("fast", False).source
    assert "parallel_chunks(" in source and "threads=1" not in source, source
    assert ":, :, :, :] = " not in source, source  # no copy over the whole accumulator
    _check(hm, func)


def test_a_whole_buffer_share_makes_the_chunks_run_in_turn(monkeypatch):
    # Where a store cannot be shared element by element, the whole accumulator is copied: the
    # grid's chunks then run one after another.
    from tvm_hybrid_nb.codegen.gpu import GpuMixin

    monkeypatch.setenv("TVM_HYBRID_NB_THREADS", "2")
    monkeypatch.setattr(GpuMixin, "_share_stored_elements", lambda self, body, accumulators, across: None)
    func = _scores()
    target, mod = zoo.schedule(func, "dlight-gpu")
    hm = hmodule.build(mod, target=target)
    source = hm.stage(0).kernel("fast", False).source
    assert ":, :, :, :] = " in source and "threads=1" in source, source
    _check(hm, func)
