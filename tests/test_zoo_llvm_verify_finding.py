"""TVM's llvm build at its default opt-level fails to verify a plain SiLU over float32 (4, 10) (a
``shufflevector`` of two 2-lane vectors): the zoo still emulates every stage, against TVM's build of
the same module at opt-level 2 (``zoo_outcomes.TVM_CODEGEN_FINDINGS``)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from tvm_hybrid_nb import module as hmodule
from tvm_hybrid_nb import zoo


def _silu(n: int, m: int):
    @T.prim_func(s_tir=True)
    def silu(a: T.Buffer((n, m), "float32"), out: T.Buffer((n, m), "float32")):
        T.func_attr({"tirx.noalias": True})
        s = T.sblock_alloc_buffer((n, m))
        for i0, i1 in T.grid(n, m):
            with T.sblock("compute"):
                vi, vj = T.axis.remap("SS", [i0, i1])
                s[vi, vj] = T.sigmoid(a[vi, vj])
        for i0, i1 in T.grid(n, m):
            with T.sblock("mul"):
                vi, vj = T.axis.remap("SS", [i0, i1])
                out[vi, vj] = a[vi, vj] * s[vi, vj]

    return silu


def test_a_silu_tvm_cannot_build_at_opt_level_3_is_checked_against_its_opt_level_2_build():
    silu = _silu(4, 10)
    with pytest.raises(Exception, match="shufflevector"):  # TVM's bug: the day it is fixed, this fails
        tvm.compile(tvm.IRModule({"main": silu}), target="llvm")
    reference = hmodule.build(silu, target=tvm.target.Target({"kind": "llvm", "opt-level": 2}))
    a = np.linspace(-6, 6, 40, dtype=np.float32).reshape(4, 10)
    built = np.zeros((4, 10), np.float32)
    reference.run_native(a, built)
    np.testing.assert_allclose(built, a / (1 + np.exp(-a.astype(np.float64))), rtol=1e-6, atol=1e-7)
    hm = hmodule.build(silu, on_failure="keep")
    emulated = np.zeros((4, 10), np.float32)
    hm.emulate(a, emulated)
    np.testing.assert_array_equal(emulated, built)
    for flavour in zoo.FLAVOURS:
        outcome = zoo.check_kernel("t.silu", silu, flavour)
        assert outcome.outcome == "ok" and outcome.stages_checked > 1, (flavour, outcome)
