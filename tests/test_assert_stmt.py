"""``T.Assert`` (TVM 0.27's ``AssertStmt``: an error kind and message parts, no ``message``).

TVM's paged-KV tree attention kernels assert on their inputs; code generation read the old
``message`` field and crashed, so every stage of such a kernel was refused.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError


@T.prim_func(s_tir=True)
def add_one_when_n_is_zero(A: T.Buffer((4,), "float32"), n: T.int32):
    T.Assert(n == T.int32(0), "n must be 0")
    for i in range(4):
        A[i] = A[i] + T.float32(1)


def test_an_assert_runs_at_every_stage_and_fails_as_the_native_build_does():
    hm = thn.build(add_one_when_n_is_zero, target="llvm")
    stages = [s for s in hm.stages[:hm.packed_api_index] if s.changed or s.index == 0]
    assert all(s.emulatable for s in stages), [(s.label, s.reason) for s in stages if not s.emulatable]
    np.testing.assert_array_equal(hm.run_native(np.zeros(4, np.float32), 0), np.ones(4, np.float32))
    with pytest.raises(Exception, match="n must be 0"):
        hm.run_native(np.zeros(4, np.float32), 1)
    for stage in stages:
        for mode in ("exact", "fast"):
            np.testing.assert_array_equal(hm.emulate(np.zeros(4, np.float32), 0, stage=stage.index, mode=mode),
                                          np.ones(4, np.float32))
            with pytest.raises(EmulationError, match="RuntimeError: n must be 0"):
                hm.emulate(np.zeros(4, np.float32), 1, stage=stage.index, mode=mode)
