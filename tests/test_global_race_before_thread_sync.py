"""Sanitizer: two threads of a block writing one *global* element race at every stage.

``s_tir.ThreadSync`` only puts barriers between conflicting accesses of shared memory, so before
that pass the sanitizer may treat each statement as ending at an implied barrier for shared
memory, but not for global memory: there two threads' writes from two branches of an ``if`` race
in the CUDA code TVM emits whatever lies between them.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError
from stage_helpers import device_stages


@T.prim_func(s_tir=True)
def racy_branches(a: T.Buffer((2,), "float32"), out: T.Buffer((1,), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(2, thread="threadIdx.x"):
            with T.sblock("w"):
                v = T.axis.spatial(2, tx)
                if a[v] > T.float32(0):
                    out[0] = a[v]
                else:
                    out[0] = a[v] * T.float32(2)


@T.prim_func(s_tir=True)
def own_elements(a: T.Buffer((64,), "float32"), out: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.sblock("w"):
                v = T.axis.spatial(64, bx * 32 + tx)
                if a[v] > T.float32(0):
                    out[v] = a[v]
                else:
                    out[v] = a[v] * T.float32(2)
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.sblock("again"):
                v = T.axis.spatial(64, bx * 32 + tx)
                out[v] = out[v] + T.float32(1)


def test_two_threads_writing_one_global_element_from_two_branches_race_at_every_stage():
    hm = thn.build(racy_branches, target="cuda")
    a = np.array([1.0, -1.0], np.float32)
    stages = device_stages(hm)
    assert any(s.name == "s_tir.ThreadSync" for s in hm.stages)
    assert len(stages) > 5
    for stage in stages:
        hm.emulate(a, np.zeros(1, np.float32), stage=stage.index)  # lockstep: one of the values lands
        for mode in ("exact", "fast"):
            with pytest.raises(EmulationError, match=r"data race on out(_\d+)?\[0\]: lanes \(threadIdx.x=0\) and "
                                                     r"\(threadIdx.x=1\)"):
                hm.emulate(a, np.zeros(1, np.float32), stage=stage.index, mode=mode, check=True)


def test_threads_writing_their_own_global_elements_in_two_loops_pass_and_match_numpy():
    hm = thn.build(own_elements, target="cuda")
    a = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    expected = np.where(a > 0, a, a * np.float32(2)) + np.float32(1)
    for stage in device_stages(hm):
        for mode in ("exact", "fast"):
            out = hm.emulate(a, np.zeros(64, np.float32), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, expected, err_msg=f"{stage.label} {mode}")
