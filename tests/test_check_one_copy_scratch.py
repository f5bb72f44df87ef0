"""Under the sanitizers, the iterations of a parallel loop that each recompute a scratch buffer alike
(dlight.cpu's softmax recomputes the row's maximum and sum for every element) share one copy of it
wherever that is proven, not only when per-iteration copies would not fit in memory.

Before, a softmax over 8,000 columns had a copy of its 8,000-wide scratch per iteration (256 MB)
and recomputed the row 8,000 times as lanes: 5.8 s a stage under ``check=True`` against 0.07 s in
fast mode, and 20 s for the kernel; over 16,000 columns the copies did not fit, the one copy was
used, and the stage took 0.4 s.  Each iteration writes what it reads first, so the checks of its own
copy hold on the one copy: a schedule whose iterations read the scratch before writing it is still
reported.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec

from tvm_hybrid_nb import module as hmodule, zoo
from tvm_hybrid_nb.errors import EmulationError

N = 256
MAXIMUM_INIT = "T_softmax_maxelem[T.int64(0), T.int64(0)] = T.float32(-340282346638528859811704183484516925440.0)"


class Softmax(nn.Module):
    def forward(self, x):
        return op.softmax(x, axis=-1)


@pytest.fixture(scope="module")
def scheduled():
    (kernel,) = zoo.collect_kernels([("softmax", Softmax(), {"x": spec.Tensor((1, 1, N), "float32")})])
    return zoo.schedule(kernel.llvm, "dlight-cpu")


def _softmax(x):
    e = np.exp(x.astype(np.float64) - x.max())
    return e / e.sum()


def test_race_check_lanes_share_one_copy_of_scratch_written_alike(scheduled):
    target, mod = scheduled
    hm = hmodule.build(mod, target=target)
    x = np.random.default_rng(0).standard_normal((1, 1, N)).astype(np.float32)
    stage0 = hm.stages[0].plan("fast", check=True)
    parallel = next(d for d in stage0.decisions if d.strategy == "race-check lanes")
    assert "one copy serves the lanes" in parallel.reason, parallel.reason
    assert {"T_softmax_maxelem", "T_softmax_expsum"} <= {a.buffer for a in stage0.allocations}, stage0.text()
    for stage in (0, 5, 9):
        out = hm.emulate(x, np.zeros_like(x), stage=stage, check=True)
        np.testing.assert_allclose(out, _softmax(x), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(out, hm.emulate(x, np.zeros_like(x), stage=9, mode="exact"))


def test_scratch_read_before_it_is_written_is_still_reported(scheduled):
    target, mod = scheduled
    text = mod["main"].script()
    assert MAXIMUM_INIT in text
    broken = tvm.script.from_source(text.replace(MAXIMUM_INIT, "T.evaluate(0)"))  # no -inf before the max
    hm = hmodule.build(tvm.IRModule({"main": broken}), target=target)
    x = np.random.default_rng(1).standard_normal((1, 1, N)).astype(np.float32)
    for stage in (0, 5, 9):
        with pytest.raises(EmulationError, match="T_softmax_maxelem.*never written"):
            hm.emulate(x, np.zeros_like(x), stage=stage, check=True)
