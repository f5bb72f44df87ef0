"""Math on constants alone is computed once, at the top of the function, not at every use.

TVM's GPU sorts and scans write ``ceil(log2(128.0))`` into every index of their merge loops
and nothing folds it: the script called libm and the cast helper at each use, a quarter of a
GPU topk's run.  The hoisted assignment keeps the expression as written.  An expression that
warns or fails when evaluated (a branch never taken) stays where it is.
"""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

import tvm_hybrid_nb as thn


@T.prim_func
def strided_by_log(a: T.Buffer((64,), "int64"), b: T.Buffer((64,), "int64")):
    for i in range(64):
        b[i] = a[i] * T.Cast("int64", T.ceil(T.log2(T.float64(128.0)))) + T.Cast("int64", T.ceil(T.log2(T.float64(4096.0))))


@T.prim_func
def guarded_log_of_negative(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "int32")):
    for i in range(8):
        if a[i] > T.float32(100):  # never true below: the cast of NaN is never evaluated
            b[i] = T.Cast("int32", T.log(T.float64(-1.0)))
        else:
            b[i] = T.Cast("int32", a[i])


def test_math_on_constants_is_assigned_once_before_the_loops_and_read_there():
    hm = thn.build(strided_by_log)
    a = np.arange(-32, 32, dtype=np.int64)
    want = a * 7 + 12
    for mode, check in (("exact", False), ("fast", False), ("exact", True), ("fast", True)):
        source = hm.stage(0).kernel(mode, check=check).source
        body = source[source.index(f"def {hm.name}("):]
        prologue, loops = body.split("for i", 1) if "for i" in body else (body, "")
        assert "libm('log2'" in prologue and "libm" not in loops, source
        np.testing.assert_array_equal(hm.emulate(a, np.zeros(64, np.int64), mode=mode, check=check), want)


def test_constant_math_that_warns_stays_in_the_branch_that_may_never_run():
    hm = thn.build(guarded_log_of_negative)
    a = np.arange(8, dtype=np.float32)
    for mode, check in (("exact", False), ("fast", False), ("exact", True), ("fast", True)):
        source = hm.stage(0).kernel(mode, check=check).source
        body = source[source.index(f"def {hm.name}("):]
        assert "_once" not in body
        np.testing.assert_array_equal(hm.emulate(a, np.zeros(8, np.int32), mode=mode, check=check),
                                      a.astype(np.int32))
