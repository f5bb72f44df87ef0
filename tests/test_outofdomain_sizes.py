"""Sizes outside an operator's domain that relax accepts on a symbolic axis (no runtime check):
reflect pad of width >= the axis extent, topk with k > the axis extent.  The emulation finds the
out-of-bounds read (the native kernel would do it); the zoo should tag it as TVM's, not report an
untagged crash."""
from __future__ import annotations

import pytest

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec

from tvm_hybrid_nb import zoo


class ReflectPad(nn.Module):
    def forward(self, x):
        return op.pad(x, [0, 0, 0, 0, 1, 1, 2, 3], mode="reflect")


class TopK0(nn.Module):
    def forward(self, x):
        return op.topk(x, k=2, axis=0, ret_type="values", largest=False)


def _kernel(model, shape, op_name, attr):
    ks = zoo.collect_kernels([("m", model, {"x": spec.Tensor(shape, "float32")})])
    return next(k for k in ks if k.name.split(".", 1)[1].startswith(op_name) and getattr(k, attr) is not None)


@pytest.fixture
def sizes(monkeypatch):
    def set_sizes(**kv):
        monkeypatch.setattr(zoo, "SYMBOLIC_SIZES", kv)
    return set_sizes


@pytest.mark.parametrize("flavour", ["none", "dlight-gpu"])
def test_reflect_pad_wider_than_axis_is_tvms(sizes, flavour):
    k = _kernel(ReflectPad(), ("b", 3, "n", 7), "reflect_pad", "llvm")
    func = k.cuda if flavour == "dlight-gpu" else k.llvm
    sizes(n=5)
    assert zoo.check_kernel(k.name, func, flavour, reference=k.reference).outcome == "ok"
    sizes(n=1, b=1)
    o = zoo.check_kernel(k.name, func, flavour, reference=k.reference)
    assert o.outcome == "crash" and "out-of-bounds read of x" in o.reason
    assert zoo.tvm_finding(o), o.reason


def test_gpu_topk_k_above_axis_is_tvms(sizes):
    k = _kernel(TopK0(), ("n", 13), "topk", "cuda")
    sizes(n=5)
    assert zoo.check_kernel(k.name, k.cuda, "dlight-gpu", reference=k.reference).outcome == "ok"
    sizes(n=1)
    o = zoo.check_kernel(k.name, k.cuda, "dlight-gpu", reference=k.reference)
    assert o.outcome == "crash" and "out-of-bounds read of values_buf" in o.reason
    assert zoo.tvm_finding(o), o.reason
