"""A model whose weight has a symbolic size named like an input's (``nn.Linear("m", 8)`` over an input of
shape ``("n", "m")``) gets two distinct variables, printed ``m`` and ``m_1``; the model means them equal.
The zoo must give both the size of ``m``: with m=33 and m_1 at OTHER_SYMBOLIC_SIZE the matmul reads the
weight out of bounds (the native run is refused, an untagged crash)."""
from __future__ import annotations

import pytest

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import spec

from tvm_hybrid_nb import zoo


class LinSymFeat(nn.Module):
    def __init__(self):
        self.a = nn.Linear("m", 8)

    def forward(self, x):
        return self.a(x)


@pytest.mark.parametrize("flavour", ["none", "dlight-gpu"])
def test_same_named_sizes_are_equal(monkeypatch, flavour):
    ks = zoo.collect_kernels([("linsymfeat", LinSymFeat(), {"x": spec.Tensor(("n", "m"), "float32")})])
    k = next(k for k in ks if "matmul" in k.name)
    monkeypatch.setattr(zoo, "SYMBOLIC_SIZES", {"n": 17, "m": 33})
    monkeypatch.setattr(zoo, "OTHER_SYMBOLIC_SIZE", 5)
    func = k.cuda if flavour == "dlight-gpu" else k.llvm
    o = zoo.check_kernel(k.name, func, flavour, reference=k.reference)
    assert o.outcome == "ok", o.reason
