"""Regression tests for the GPU fidelity classes of issue 12 (kernels as TVM's dlight schedules emit
them), each a minimal TVMScript kernel checked at every changed stage before MakePackedAPI against
numpy or the native llvm build."""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn


def _emulated_stages(hm):
    for stage in hm.stages:
        if hm.packed_api_index is not None and stage.index >= hm.packed_api_index:
            break
        if stage.changed:
            yield stage


def _check_every_stage(hm, inputs, expected, modes=("exact", "fast"), check=True):
    """Emulate every changed stage in every mode; each output must equal ``expected`` bit for bit."""
    checked = 0
    for stage in _emulated_stages(hm):
        assert stage.emulatable, f"{stage.label}: {stage.reason}"
        for mode in modes:
            args = [a.copy() for a in inputs]
            hm.emulate(*args, stage=stage.index, mode=mode, check=check)
            got = [a for a, p in zip(args, hm.params) if p.is_output]
            for g, want in zip(got, expected):
                np.testing.assert_array_equal(g, want, err_msg=f"stage {stage.label}, {mode} mode")
        checked += 1
    assert checked >= 3
    return checked


# ---------------------------------------------------------------- A: local memory is one copy per thread
@T.prim_func(s_tir=True)
def _rfactor_local(A: T.Buffer((2, 8), "float32"), B: T.Buffer((2,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        with T.sblock("outer"):
            vb = T.axis.spatial(2, bx)
            rf = T.sblock_alloc_buffer((8,), scope="local")
            for tx in T.thread_binding(8, thread="threadIdx.x"):
                with T.sblock("copy"):
                    v = T.axis.spatial(8, tx)
                    rf[v] = A[vb, v]
            for tx in T.thread_binding(8, thread="threadIdx.x"):
                with T.sblock("sum"):
                    v = T.axis.reduce(8, tx)
                    with T.init():
                        B[vb] = T.float32(0)
                    B[vb] = B[vb] + rf[v]


def test_local_buffer_is_per_thread_across_loop_nests():
    """Class A: the reduction block reads each thread's own copy of ``rf`` written in another loop nest
    (stage 0 used thread 0's copy only: 0 instead of 28)."""
    hm = thn.build(_rfactor_local, target="cuda")
    a = np.arange(16, dtype="float32").reshape(2, 8)
    expected = np.zeros(2, "float32")
    for j in range(8):  # the IR's order: thread 0 first
        expected += a[:, j]
    _check_every_stage(hm, [a, np.zeros(2, "float32")], [expected])
