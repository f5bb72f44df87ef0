"""Regression: scatter_elements into a buffer of symbolic shape (b, m).  relax legalizes it with the
indices inside a flattened index `(i * m + (idx + (idx < 0) * m)) // m, ... % m`; the extent the
index takes part in is symbolic, and _index_extents dropped symbolic extents of such nested indices,
so the zoo fed idx in [-100, 100]: the native reference was refused (out of bounds) and the kernel
was a crash instead of a check."""
from __future__ import annotations

import numpy as np

from tvm_hybrid_nb import zoo


def _scatter_kernels():
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    R = relax.op

    class Scatter(nn.Module):
        def forward(self, base, idx, upd):
            return wrap_nested(R.scatter_elements(base._expr, idx._expr, upd._expr, axis=1, reduction="add"), "sc")

    return zoo.collect_kernels([("symscatter", Scatter(), {
        "base": spec.Tensor(("b", "m"), "float32"), "idx": spec.Tensor(("b", "n"), "int64"),
        "upd": spec.Tensor(("b", "n"), "float32")})])


def test_scatter_indices_into_a_symbolic_axis_lie_in_range():
    from tvm_hybrid_nb import module as hmodule

    (k,) = [k for k in _scatter_kernels() if k.llvm is not None]
    hm = hmodule.build(k.llvm, target="llvm")
    spec = {p.name: p for p in hm.params}["idx"]
    assert spec.index_extent is not None, hm.params
    inputs = zoo._inputs(hm.params, 0, k.name)
    base, idx, upd = (inputs[i] for i, p in enumerate(hm.params) if p.name in ("base", "idx", "upd"))
    m = base.shape[1]
    assert idx.min() >= 0 and idx.max() < m, idx
    # Independent truth: numpy's scatter-add along axis 1.
    want = base.copy()
    for r in range(idx.shape[0]):
        for c in range(idx.shape[1]):
            want[r, idx[r, c]] += upd[r, c]
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
    got = hm.result_values(args, hm.emulate(*args, stage=0, mode="exact"))
    np.testing.assert_allclose(got[0], want, rtol=1e-6)


def test_scatter_into_a_symbolic_axis_is_checked_not_refused():
    (k,) = [k for k in _scatter_kernels() if k.llvm is not None]
    for flavour in ("none", "dlight-cpu"):
        outcome = zoo.check_kernel(k.name, k.llvm, flavour, reference=k.reference)
        assert outcome.outcome == "ok" and outcome.stages_checked, outcome
