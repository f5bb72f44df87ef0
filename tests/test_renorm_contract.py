"""relax's get_renorm_cutoff (op.renormalize_top_p_top_k_prob) and get_renorm_prob
(op.sample_top_p_top_k_from_sorted_prob) write one element per row from the position where a mask over a
cumulative sum stops holding: on random (non-monotone) rows several threads write it, a race whose result
depends on the order (stage 0 of the dlight-gpu kernel differed from the serial native run at
OTHER_SYMBOLIC_SIZE=5).  The zoo must feed them sorted probabilities and their cumulative sum."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec

from tvm_hybrid_nb import zoo

class TopPTopK(nn.Module):
    def forward(self, logits, tp, tk, u, si):
        p = op.softmax(logits, axis=-1)
        sp, sidx = op.sort(p, axis=-1, descending=True), op.argsort(p, axis=-1, descending=True)
        return (op.sample_top_p_top_k_from_sorted_prob(sp, sidx, tp, tk, u, si),
                op.renormalize_top_p_top_k_prob(p, sp, tp, tk))

SPEC = {"logits": spec.Tensor(("b", 13), "float32"), "tp": spec.Tensor(("b", 1), "float32"),
        "tk": spec.Tensor(("b", 1), "int32"), "u": spec.Tensor(("b", 1), "float32"),
        "si": spec.Tensor(("b", 1), "int64")}

@pytest.fixture(scope="module")
def kernels():
    return zoo.collect_kernels([("toptopk", TopPTopK(), SPEC)])

@pytest.mark.parametrize("op_name", ["get_renorm_cutoff", "get_renorm_prob"])
@pytest.mark.parametrize("other", [4, 5, 7])
def test_renorm_kernels_on_sorted_cumsum(kernels, monkeypatch, op_name, other):
    monkeypatch.setattr(zoo, "OTHER_SYMBOLIC_SIZE", other)
    k = next(k for k in kernels if k.name == f"toptopk.{op_name}" and k.cuda is not None)
    o = zoo.check_kernel(k.name, k.cuda, "dlight-gpu", reference=k.reference)
    assert o.outcome == "ok", o.reason

def test_contract_fills_a_nondecreasing_cumsum():
    params = zoo.collect_kernels([("toptopk", TopPTopK(), SPEC)])
    k = next(k for k in params if k.name == "toptopk.get_renorm_cutoff")
    from tvm_hybrid_nb import module as hmodule
    hm = hmodule.build(tvm.IRModule({"main": k.llvm}), target="llvm", on_failure="keep")  # params only
    values = dict(zip([p.name for p in hm.params], zoo._inputs(hm.params, 0, k.name)))
    c, s = values["cumsum_sorted"], values["sorted_prob"]
    assert (np.diff(c, axis=-1) >= 0).all() and (np.diff(s, axis=-1) <= 0).all()
    np.testing.assert_allclose(np.cumsum(s, axis=-1), c, rtol=1e-5)
