"""CUDA prints TIR's ``And``/``Or`` as C's ``&&``/``||``: the right side is not evaluated in threads
the left side decides, so ``tx < 4 && A[tx] > 0`` never reads ``A[4]`` on the GPU (TVM's paged-KV
tree attention guards its mask reads so).  The emulation's lanes evaluate the right side only in the
threads that reach it; LLVM evaluates both sides, so on llvm the read is real."""
from __future__ import annotations

import numpy as np
from tvm import tirx
from tvm.script import tirx as T

import tvm_hybrid_nb as thn


@T.prim_func(s_tir=True)
def guarded_reads(A: T.Buffer((4,), "int32"), O: T.Buffer((8,), "int32")):
    T.func_attr({"tirx.is_scheduled": True})
    for tx in T.thread_binding(8, thread="threadIdx.x"):
        if tirx.all(tx < 4, A[tx] > 0):
            O[tx] = 1
        if tirx.any(tx >= 4, A[tx] < 0):
            O[tx] = O[tx] + 2


def test_a_read_guarded_by_the_left_side_of_and_or_or_does_not_trap_at_any_stage():
    hm = thn.build(guarded_reads, target="cuda")
    a = np.array([1, -1, 0, 5], np.int32)
    want = np.array([1, 2, 0, 1, 2, 2, 2, 2], np.int32)
    stages = [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]
    assert len(stages) > 5
    for stage in stages:
        for mode in ("exact", "fast"):
            for check in (False, True):
                out = hm.emulate(a, np.zeros(8, np.int32), stage=stage.index, mode=mode, check=check)
                np.testing.assert_array_equal(out, want, err_msg=f"{stage.label} {mode} check={check}")
