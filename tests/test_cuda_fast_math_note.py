"""TVM builds CUDA with ``--use_fast_math`` (float32 subnormals flush to zero; division, square root,
exp, log, sin, cos, pow approximate) and nvcc contracts ``a * b + c`` into one fused multiply-add: no
IEEE emulation of the TIR gives a GPU's last bits there.  The script of a CUDA stage says so, naming
what its kernel does; an integer CUDA kernel and an llvm kernel say nothing."""
from __future__ import annotations

import inspect

import numpy as np
import tvm
import tvm.support.nvcc
from tvm.relax.frontend import nn
from tvm.script import tirx as T

from tvm_hybrid_nb import module as hmodule
from tvm_hybrid_nb import zoo

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
NOT_EXACT = "Not bit-exact to a GPU: TVM builds CUDA with --use_fast_math"


@T.prim_func
def axpy_exp(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float32")):
    for i in T.thread_binding(64, thread="threadIdx.x"):
        C[i] = A[i] * B[i] + T.exp(A[i]) / B[i]


@T.prim_func
def int_axpy(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int32"), C: T.Buffer((64,), "int32")):
    for i in T.thread_binding(64, thread="threadIdx.x"):
        C[i] = A[i] * B[i] + A[i]


@T.prim_func
def axpy_exp_llvm(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float32")):
    for i in range(64):
        C[i] = A[i] * B[i] + T.exp(A[i]) / B[i]


def _header(hm, stage=0):
    source = hm.get_source(stage)
    return source[:source.index('"""', 3)]


def test_tvm_compiles_cuda_with_fast_math():
    assert '"--use_fast_math"' in inspect.getsource(tvm.support.nvcc)  # nvcc's and NVRTC's options


def test_a_cuda_stage_says_what_a_gpu_computes_otherwise():
    hm = hmodule.build(tvm.IRModule({"main": axpy_exp}), target=CUDA)
    for stage in (0, hm.packed_api_index - 1):
        header = _header(hm, stage)
        assert NOT_EXACT in header
        for said in ("float32 multiply feeding an add or subtract is one fused multiply-add",
                     "float32 subnormals flush to zero", "float32 division are approximate",
                     "exp come from CUDA's math library"):
            assert said in " ".join(header.split()), (said, header)
    a = np.linspace(0.5, 2, 64, dtype=np.float32)
    c = np.zeros(64, np.float32)
    hm.emulate(a, a[::-1].copy(), c)  # the emulation is still IEEE float32, as the TIR writes it
    np.testing.assert_allclose(c, a * a[::-1] + np.exp(a) / a[::-1], rtol=1e-6)
    assert c.dtype == np.float32


def test_integer_cuda_kernels_and_llvm_kernels_say_nothing():
    assert "Not bit-exact" not in _header(hmodule.build(tvm.IRModule({"main": int_axpy}), target=CUDA))
    assert "Not bit-exact" not in _header(hmodule.build(axpy_exp_llvm, target="llvm"))


class Linear(nn.Module):
    def __init__(self):
        self.proj = nn.Linear(16, 8, bias=False)

    def forward(self, x):
        return self.proj(x)


def test_a_dlight_gpu_matmul_says_its_multiply_adds_are_fused_on_a_gpu():
    kernels = zoo.collect_kernels([("linear", Linear(), {"x": nn.spec.Tensor((4, 16), "float32")})])
    (kernel,) = [k for k in kernels if "matmul" in k.name]
    target, mod = zoo.schedule(kernel.cuda, "dlight-gpu")
    header = " ".join(_header(hmodule.build(mod, target=target)).split())
    assert NOT_EXACT in header and "fused multiply-add" in header, header
    none_target, none_mod = zoo.schedule(kernel.llvm, "none")
    assert "Not bit-exact" not in _header(hmodule.build(none_mod, target=none_target))
