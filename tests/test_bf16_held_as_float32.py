"""bfloat16 on a target without bfloat16 arithmetic (llvm, cuda before sm_80): TVM's
``BF16ComputeLegalize`` holds bfloat16 allocations as float32 and computes in float32, rounding where
a value is stored to a bfloat16 parameter.  The emulation holds the sblock allocations so, and an
operation over two of them (``X * Y + A``) once kept its bfloat16 type over float32 operands: the
pass then read the float32 product's bits as bfloat16 (a crash, or a product cut to 16 bits with no
alarm; MetaSchedule's shared-memory bf16 matmul on sm_75, 2nd MetaSchedule probe)."""
import ml_dtypes
import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn


@T.prim_func(s_tir=True)
def intermediates(A: T.Buffer((8,), "bfloat16"), C: T.Buffer((8,), "bfloat16")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    X = T.sblock_alloc_buffer((8,), "bfloat16")
    Y = T.sblock_alloc_buffer((8,), "bfloat16")
    for i in range(8):
        with T.sblock("x"):
            vi = T.axis.spatial(8, i)
            X[vi] = A[vi] + T.bfloat16(1.0)
    for i in range(8):
        with T.sblock("y"):
            vi = T.axis.spatial(8, i)
            Y[vi] = A[vi] + T.bfloat16(2.0)
    for i in range(8):
        with T.sblock("c"):
            vi = T.axis.spatial(8, i)
            C[vi] = T.exp(X[vi]) * Y[vi] + A[vi] - T.max(X[vi], Y[vi])


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_an_operation_over_two_float32_held_buffers_computes_in_float32(mode):
    hm = thn.build(intermediates)
    a = (np.random.default_rng(1).standard_normal(8) * 3).astype(ml_dtypes.bfloat16)
    native = np.zeros(8, ml_dtypes.bfloat16)
    hm.run_native(a.copy(), native)
    for stage in [s for s in hm.stages[:hm.packed_api_index] if s.changed or s.index == 0]:
        c = np.zeros(8, ml_dtypes.bfloat16)
        hm.emulate(a.copy(), c, stage=stage.index, mode=mode, check=True)
        np.testing.assert_array_equal(c.astype(np.float32), native.astype(np.float32), err_msg=stage.label)
