"""``tvm_warp_shuffle_xor`` over a 64-lane warp (rocm's wavefront, ``thread_warp_size`` 64): lane i
reads lane i ^ 32.  The emulation numbered lanes modulo 32, so lanes 32..63 read past the warp."""
import numpy as np
import tvm
from tvm.script import tirx as T

from tvm_hybrid_nb import module as hmodule


@T.prim_func(s_tir=True)
def xor_across_halves(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"tirx.noalias": True})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        with T.sblock("x"):
            v = T.axis.spatial(64, tx)
            B[v] = T.tvm_warp_shuffle_xor(T.uint32(0xFFFFFFFF), A[v], 32, 64, 64)


def test_xor_shuffle_over_a_64_lane_warp_reads_the_other_half():
    target = tvm.target.Target("rocm")
    assert int(target.attrs["thread_warp_size"]) == 64
    hm = hmodule.build(tvm.IRModule({"main": xor_across_halves}), target=target, on_failure="keep")
    a = np.arange(64, dtype=np.float32)
    want = a[np.arange(64) ^ 32]
    stages = [s for s in hm.stages if s.changed and s.emulatable
              and (hm.packed_api_index is None or s.index < hm.packed_api_index)]
    assert stages
    for stage in stages:
        for mode in ("fast", "exact"):
            b = np.zeros(64, np.float32)
            hm.emulate(a.copy(), b, stage=stage.index, mode=mode)
            np.testing.assert_array_equal(b, want, err_msg=f"{stage.label} {mode}")
