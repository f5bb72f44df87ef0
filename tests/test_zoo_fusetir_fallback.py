"""A model whose positions are ``arange(m, m + n)`` of two symbolic sizes (rotary angles of a chunk after a
KV cache of length m): TVM's FuseTIR raises on the fused group (a TVM bug: relax.get_default_pipeline fails
alike for llvm and cuda), and the zoo lowered nothing.  The zoo now checks the model's kernels unfused."""
from __future__ import annotations

import numpy as np
import pytest

from tvm_hybrid_nb import zoo


def _model():
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    R = relax.op

    class OffsetPositions(nn.Module):
        def forward(self, x, past):  # x (n, 1), past (m,) only for its length
            n, m = x.shape[0], past.shape[0]
            pos = R.astype(R.arange(m, m + n, 1, "int64"), "float32")
            return wrap_nested(R.multiply(R.reshape(pos, (n, 1)), x._expr), "y")

    return OffsetPositions(), {"x": spec.Tensor(("n", 1), "float32"), "past": spec.Tensor(("m",), "float32")}


def test_fuse_tir_still_fails_on_arange_of_two_symbolic_sizes():
    """The TVM bug the fallback is for (when TVM fixes it, the zoo fuses again and this test says so)."""
    import tvm
    from tvm import relax

    model, spec = _model()
    mod, _ = model.export_tvm(spec={"forward": spec})
    target = tvm.target.Target("llvm")
    with target, pytest.raises(tvm.error.InternalError, match="VarRemapGet"):
        relax.get_default_pipeline(target)(mod)


def test_zoo_checks_the_kernels_of_a_model_fuse_tir_fails_on():
    model, spec = _model()
    kernels = zoo.collect_kernels([("offpos", model, spec)])
    names = [k.name for k in kernels]
    assert "offpos.arange" in names, names
    report = zoo.run_zoo(["none", "dlight-cpu", "dlight-gpu"], mode="fast", kernels=kernels)
    assert all(o.outcome == "ok" for o in report.outcomes), report.problems()

    # Independent truth: the arange kernel emulated against numpy (m = 3, n = 5).
    from tvm_hybrid_nb import module as hmodule

    (arange,) = [k for k in kernels if k.name == "offpos.arange"]
    hm = hmodule.build(arange.llvm, target="llvm")
    inputs = zoo._inputs(hm.params, 0, arange.name)
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
    (got,) = hm.result_values(args, hm.emulate(*args, stage=0, mode="exact"))
    m = next(a for a, p in zip(inputs, hm.params) if not p.is_buffer)
    np.testing.assert_array_equal(got, np.arange(m, m + got.shape[0], dtype=np.int64))
