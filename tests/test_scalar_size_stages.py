"""dlight.cpu's group norm over a symbolic image, planned for the sizes of each call.

Relax passes a symbolic image's sizes ``h`` and ``w`` as scalar parameters and sizes the kernel's
buffers by them (``(h - 1) // 2 + 1``); ``CompactBufferAllocation`` then writes regions of them in
1,140 to 2,430 nested mins and maxes.  Planned for every size, each stage took 2-7 s of TVM's
simplifier (the kernel 82 s in fast mode, 19 s in exact mode, ~100 s with the sanitizers): a stage
is now planned for the call's sizes, scalar parameters bound too.  Bound, the sanitizers' plan gave
a one-copy accumulator (written alike by every iteration of a parallel loop) a value read from
another buffer's per-iteration copies, whose store then failed to broadcast; one iteration's
value is stored now.
"""
from __future__ import annotations

import numpy as np

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.zoo_random import random_models

H, W = 5, 6


def _group_norm():
    kernels = zoo.collect_kernels(random_models(1, seed=206, family="image"))
    kernel = next(k for k in kernels if k.name == "i206.group_norm")
    target, mod = zoo.schedule(kernel.llvm, "dlight-cpu")
    return kernel.llvm, thn.build(mod["main"], target=target)


def test_dlight_cpu_group_norm_stages_are_planned_for_the_image_size_and_match_tvm():
    unscheduled, hm = _group_norm()
    rows, cols = (H - 1) // 2 + 1, (W - 1) // 2 + 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, rows, cols)).astype(np.float32)
    weight, bias = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    want = np.zeros_like(x)
    thn.build(unscheduled, target="llvm").run_native(x, weight, bias, H, W, want)
    labels = {stage.label.split(" ", 1)[1]: stage for stage in hm.stages}
    for name in ("ConvertBlocksToOpaque", "CompactBufferAllocation"):
        stage = labels[name]
        for check in (False, True):
            got = hm.emulate(x, weight, bias, H, W, np.zeros_like(x), stage=stage.index, mode="fast", check=check)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        kernel = stage.kernel("fast", sizes={"h": H, "w": W})
        assert kernel.plan.per_call.startswith(f"planned for this call's sizes h = {H}, w = {W}: ")
        assert f"conv2d: float32[2, 3, {rows}, {cols}]" in kernel.source  # the sizes bound, not h's expressions
