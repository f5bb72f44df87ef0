"""Host code of a GPU function cannot dereference device memory.  A loop left unbound to threads in
a cuda PrimFunc runs on the host after SplitHostDevice, and TVM builds it all the same (VerifyMemory
does not object): dlight's ``LowBatchGEMV`` leaves its rf-combine blocks so.  With ``check=True`` the
emulation says so at every stage, instead of the "never written" a host read of what a launched
kernel wrote gave after SplitHostDevice; without it, the emulation computes the TIR."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.relax.frontend import nn
from tvm.s_tir import dlight as dl
from tvm.script import tirx as T

from tvm_hybrid_nb import module as hmodule
from tvm_hybrid_nb import zoo, zoo_thread_local
from tvm_hybrid_nb.errors import EmulationError

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})


@T.prim_func(s_tir=True)
def device_then_host(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"tirx.noalias": True})
    tmp = T.alloc_buffer((64,), "float32")
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.sblock("dev"):
                v = T.axis.spatial(64, bx * 32 + tx)
                tmp[v] = A[v] * T.float32(2)
    for i in range(64):  # no thread binding: host code
        with T.sblock("host"):
            v = T.axis.spatial(64, i)
            B[v] = tmp[v] + T.float32(1)


def _stages(hm):
    return [s for s in hm.stages if s.changed and s.index < hm.packed_api_index]


def test_host_code_touching_device_memory_is_said_at_every_stage():
    mod = tvm.IRModule({"main": device_then_host})
    source = "\n".join(m.inspect_source() for m in tvm.tirx.build(mod, target=CUDA).imports)
    assert "tmp_ptr[" in source and "B_ptr" not in source  # TVM builds it; B is written on the host
    hm = hmodule.build(mod, target=CUDA)
    a = np.arange(64, dtype=np.float32)
    for stage in _stages(hm):
        for mode in ("fast", "exact"):
            b = np.zeros(64, np.float32)
            hm.emulate(a.copy(), b, stage=stage.index, mode=mode)
            np.testing.assert_array_equal(b, a * 2 + 1)
            with pytest.raises(EmulationError, match="host code writes B, device memory, outside any kernel launch"):
                hm.emulate(a.copy(), np.zeros(64, np.float32), stage=stage.index, mode=mode, check=True)
    assert "B" in zoo_thread_local.host_access_evidence(device_then_host, CUDA)


class HalfGEMV(nn.Module):
    def __init__(self):
        self.fc = nn.Linear(256, 96, bias=False, dtype="float16")

    def forward(self, x):
        return self.fc(x)


def test_dlight_low_batch_gemv_leaves_host_loops_over_device_memory():
    # With a symbolic row count, TVM 0.27's LowBatchGEMV binds only the rf block: the padding, the
    # rf combine, the sum and the unpadding stay unbound, and tvm.compile builds them as host loops.
    kernels = zoo.collect_kernels([("gemv", HalfGEMV(), {"x": nn.spec.Tensor((1, "n", 256), "float16")})])
    (kernel,) = [k for k in kernels if "matmul" in k.name]
    with CUDA:
        mod = dl.ApplyDefaultSchedule(dl.gpu.LowBatchGEMV(), dl.gpu.Fallback())(tvm.IRModule({"main": kernel.cuda}))
    evidence = zoo_thread_local.host_access_evidence(mod["main"], CUDA)
    assert evidence is not None and "x_pad" in evidence and "outside every thread launch" in evidence, evidence
    hm = hmodule.build(mod, target=CUDA)
    rng = np.random.default_rng(0)
    x, w = rng.uniform(-1, 1, (1, 3, 256)).astype(np.float16), rng.uniform(-1, 1, (256, 96)).astype(np.float16)
    out = np.zeros((1, 3, 96), np.float16)
    hm.emulate(x, w, out)  # the TIR's meaning, host loops included
    np.testing.assert_allclose(out.astype(np.float32), x.astype(np.float32) @ w.astype(np.float32),
                               rtol=2e-2, atol=2e-2)
    with pytest.raises(EmulationError, match="host code writes x_pad, device memory, outside any kernel launch"):
        hm.emulate(x, w, np.zeros((1, 3, 96), np.float16), check=True)
