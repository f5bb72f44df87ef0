"""A parameter buffer whose size is a float expression of a symbolic size, as TVM's ONNX frontend gives
Resize with float scales on a symbolic height: ``int64(float32(2.0) * float32(h))``.  The size is
computed as TVM computes it (the product rounded in float32, the cast toward zero), the native
build is the truth; the kernel was refused before ("buffer shape expression")."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from tvm_hybrid_nb import module as hmodule
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.errors import ArgumentShapeError
from tvm_hybrid_nb.signature import dim_symbols, dim_value


def _upsample(scale: float):
    @T.prim_func
    def upsample(a: T.handle, b: T.handle):
        h = T.int64()
        A = T.match_buffer(a, (h,), "float32")
        B = T.match_buffer(b, (T.Cast("int64", T.float32(scale) * T.Cast("float32", h)),), "float32")
        for i in range(T.Cast("int64", T.float32(scale) * T.Cast("float32", h))):
            B[i] = A[T.min(T.Cast("int64", T.Cast("float32", i) / T.float32(scale)), h - T.int64(1))]

    return upsample


def _native(func, a: np.ndarray, out_len: int) -> np.ndarray:
    out = tvm.runtime.tensor(np.zeros(out_len, np.float32))
    tvm.compile(func, "llvm")(tvm.runtime.tensor(a), out)
    return out.numpy()


@pytest.mark.parametrize("scale, h, out_len", [
    (2.0, 3, 6),
    # float32(0.7) * 10 = 6.99999988..., which float32 rounds to 7.0: in float64 the size would be 6
    (0.7, 10, 7),
])
def test_a_size_given_by_a_float_scale_is_tvms_at_every_stage(scale, h, out_len):
    func = _upsample(scale)
    a = np.arange(h, dtype=np.float32) + 1
    want = _native(func, a, out_len)
    hm = hmodule.build(func)
    for stage in hm.stages:
        if stage.changed and (hm.packed_api_index is None or stage.index < hm.packed_api_index):
            for mode in ("fast", "exact"):
                got = np.zeros(out_len, np.float32)
                hm.emulate(a, got, stage=stage.index, mode=mode, check=True)
                np.testing.assert_array_equal(got, want, err_msg=f"{stage.label} {mode}")
    with pytest.raises(ArgumentShapeError):
        hm.emulate(a, np.zeros(out_len + 1, np.float32))
    outcome = zoo.check_kernel("t.upsample", func, "none", check=True)  # a blockless kernel: dlight's rules
    assert outcome.outcome == "ok" and outcome.stages_checked > 1, outcome  # do not schedule it


def test_shape_expressions_with_float_casts_evaluate_like_tvm():
    assert dim_value("int(np.float32(0.7) * np.float32(h))", {"h": 10}) == 7
    assert dim_value("int(np.float64(np.float32(0.7)) * np.float64(h))", {"h": 10}) == 6  # float64 keeps 6.99..
    assert dim_value("int(np.float32(h) / np.float32(2.0))", {"h": -5}) == -2  # toward zero
    assert dim_symbols("int(np.float32(2.0) * np.float32(h)) + n") == ["h", "n"]
    with pytest.raises(ValueError, match="float casts"):
        dim_value("int(np.sqrt(h))", {"h": 4})
