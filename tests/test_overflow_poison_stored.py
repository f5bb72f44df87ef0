"""On LLVM targets an overflowing nsw/nuw add, sub or mul is poison: a value, harmful only where it is
used (a branch, an address, a divisor, an output).  Relax fuses ``where(|x| < 40, x * 50000000, 0)``
into a kernel that stores every product into an intermediate buffer and selects from it: the
overflowing products are stored, never selected, and the native result is defined.  The sanitizer
taints the stored elements and reports only a read that uses one; C targets (cuda) keep C's rule,
signed overflow undefined at the operation."""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError

MODES = ("exact", "fast")


def _where_through_buffer(limit: int):
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int32")):
        T_mul = T.sblock_alloc_buffer((64,), "int32")
        for i in range(64):
            with T.sblock("mul"):
                vi = T.axis.spatial(64, i)
                T_mul[vi] = A[vi] * 50000000
        for i in range(64):
            with T.sblock("where"):
                vi = T.axis.spatial(64, i)
                B[vi] = T.Select(T.abs(A[vi]) < limit, T_mul[vi], 0)
    return main


A = (np.arange(64, dtype=np.int32) - 32) * 3  # |a| up to 96: a product overflows from |a| = 43


def test_overflow_stored_and_never_selected_is_no_error_and_matches_the_native_build():
    hm = thn.build(_where_through_buffer(40), target="llvm")
    want = np.where(np.abs(A) < 40, A * 50000000, 0).astype(np.int32)
    np.testing.assert_array_equal(hm.run_native(A.copy(), np.zeros(64, np.int32)), want)
    for mode in MODES:
        np.testing.assert_array_equal(hm.emulate(A.copy(), np.zeros(64, np.int32), mode=mode, check=True), want)


def test_overflow_stored_then_selected_is_reported_with_the_overflow_that_made_it():
    hm = thn.build(_where_through_buffer(60), target="llvm")
    for mode in MODES:
        hm.emulate(A.copy(), np.zeros(64, np.int32), mode=mode)  # unchecked: the wrapped products
        with pytest.raises(EmulationError, match=r"read of T_mul\[\d+\], an element of a buffer allocation that "
                                                 r"was never written or was stored an undefined value \(int32 "
                                                 r"overflow: -?\d+ \* 50000000"):
            hm.emulate(A.copy(), np.zeros(64, np.int32), mode=mode, check=True)


@T.prim_func(s_tir=True)
def _overflow_as_index(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int32")):
    for i in range(64):
        with T.sblock("b"):
            vi = T.axis.spatial(64, i)
            B[vi] = A[(A[vi] * 50000000) % 64]


@T.prim_func(s_tir=True)
def _overflow_in_registers_on_cuda(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int32")):
    T.func_attr({"tirx.is_scheduled": True})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        with T.sblock("b"):
            tmp = T.sblock_alloc_buffer((1,), "int32", scope="local")
            tmp[0] = A[tx] * 50000000
            B[tx] = T.Select(T.abs(A[tx]) < 40, tmp[0], 0)


@pytest.mark.parametrize("kernel,target", [(_overflow_as_index, "llvm"), (_overflow_in_registers_on_cuda, "cuda")])
def test_an_overflow_used_as_an_address_or_under_c_rules_is_reported_where_it_happens(kernel, target):
    hm = thn.build(kernel, target=target)
    for mode in MODES:
        with pytest.raises(EmulationError, match=r"int32 overflow: -?\d+ \* 50000000 = -?\d+, outside"):
            hm.emulate(A.copy(), np.zeros(64, np.int32), mode=mode, check=True)
