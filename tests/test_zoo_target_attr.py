"""A kernel taken from a Relax pipeline after ``BindTarget`` carries a ``target`` attribute, and TVM's
build follows it over the target asked for: the zoo's llvm reference of an OpenCL-bound kernel was
an OpenCL build, called with CPU arrays ("Mismatched A.device_type": a crash of every check).  The
flavour and the llvm reference choose the targets."""
import numpy as np
import pytest
from tvm.script import tirx as T

from tvm_hybrid_nb import zoo


@T.prim_func(s_tir=True)
def scale_rows(A: T.Buffer((8, 16), "float32"), B: T.Buffer((8, 16), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True, "target": T.target("opencl")})
    for i, j in T.grid(8, 16):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(3) - T.float32(1)


@pytest.mark.parametrize("flavour", zoo.FLAVOURS)
def test_a_target_attribute_does_not_choose_the_build(flavour):
    outcome = zoo.check_kernel("scale_rows", scale_rows, flavour, check=True)
    assert outcome.outcome == "ok", outcome.reason
    assert outcome.stages_checked >= 1


def test_the_reference_is_the_llvm_build_of_the_kernel():
    native = zoo._native_reference(zoo._without_target(scale_rows))
    a = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    b = np.zeros_like(a)
    native.run_native(a, b)
    np.testing.assert_array_equal(b, a * np.float32(3) - np.float32(1))
