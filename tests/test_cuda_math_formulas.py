"""A float16 ``tanh`` means different values on CUDA and in TVM's llvm code.

TVM lowers ``tanh`` for llvm as ``(1 - exp(-2x)) / (1 + exp(-2x))`` computed in the operand's dtype
(``stage.LLVM_FORMULA_INTRINSICS``), 1-2 ulps off in float16; CUDA's ``htanh`` is ``tanhf`` of the
value as float32, rounded once.  The emulator follows each target; the zoo used to compare a GPU
schedule of a float16 ``tanh`` with the llvm build and call the GPU kernel wrong (a random chain of
``nn`` ops: ``astype(tanh(astype(x, float16)), float32)``).  Where the unscheduled kernel's meaning on
the GPU (CUDA, Metal) differs from its llvm build, it is the reference for the GPU schedule, said so in
the outcome.
"""
from __future__ import annotations

import numpy as np
from tvm import te

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.zoo_reference import CUDA_REFERENCE, GPU_REFERENCE


def _half_tanh():
    x = te.placeholder((8, 64), "float32", name="x")
    y = te.compute((8, 64), lambda i, j: te.tanh(x[i, j].astype("float16")).astype("float32"), name="y")
    return te.create_prim_func([x, y])


def _inputs():
    return np.random.default_rng(0).uniform(-3, 3, (8, 64)).astype(np.float32)


def test_cuda_rounds_tanhf_and_llvm_computes_the_formula_in_float16():
    x = _inputs()
    half = x.astype(np.float16)
    on_cuda = np.tanh(half.astype(np.float32)).astype(np.float16).astype(np.float32)  # htanh
    gpu = thn.build(_half_tanh(), target="cuda")
    for mode in ("exact", "fast"):
        np.testing.assert_array_equal(gpu.emulate(x, np.zeros_like(x), mode=mode), on_cuda)
    cpu = thn.build(_half_tanh(), target="llvm")
    native = np.zeros_like(x)
    cpu.run_native(x, native)
    assert (native != on_cuda).any()  # the formula's float16 roundings
    for mode in ("exact", "fast"):
        np.testing.assert_array_equal(cpu.emulate(x, np.zeros_like(x), mode=mode), native)


def test_the_zoo_compares_a_gpu_float16_tanh_with_its_meaning_on_the_gpu():
    func = _half_tanh()
    gpu = zoo.check_kernel("half.tanh", func, "dlight-gpu")
    assert gpu.outcome == "ok" and gpu.reason == CUDA_REFERENCE, gpu
    assert gpu.stages_checked > 5
    metal = zoo.check_kernel("half.tanh", func, "dlight-metal")
    assert metal.outcome == "ok" and metal.reason == GPU_REFERENCE.format(target="Metal"), metal
    for flavour in ("none", "dlight-cpu"):  # llvm kernels: the llvm build stays the reference
        outcome = zoo.check_kernel("half.tanh", func, flavour)
        assert outcome.outcome == "ok" and CUDA_REFERENCE not in outcome.reason, outcome
