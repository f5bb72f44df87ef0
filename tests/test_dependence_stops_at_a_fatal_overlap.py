"""The dependence test of a loop stops at the first buffer whose overlap no copy can lift.

A loop whose iterations overlap on memory that neither privatisation nor one copy written alike can
give the lanes (a parameter, any memory of a GPU kernel, any memory under the sanitizers) stays
serial whatever its other buffers do, so the buffers after it are not tested: a GPU merge sort's
level loop overlaps on all four of its buffers, and the last three tests were three quarters of that
loop's analysis.  The plan is the same: the reason names the first overlap, and scratch that copies
can lift is still tested to the last buffer.
"""
from __future__ import annotations

import numpy as np
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import plan as P
from tvm_hybrid_nb.codegen.dependence import loop_dependences


@T.prim_func
def two_scratch_rows(a: T.Buffer((8, 4), "float32"), out: T.Buffer((8,), "float32")):
    s = T.alloc_buffer((4,), "float32")
    t = T.alloc_buffer((4,), "float32")
    for i in range(8):
        for k in range(4):
            s[k] = a[i, k] * 2.0
        for k in range(4):
            t[k] = s[3 - k] + 1.0
        out[i] = t[0] + t[1] * t[2] - t[3]


@T.prim_func
def running_sums(a: T.Buffer((8, 4), "float32"), acc: T.Buffer((4,), "float32"),
                 out: T.Buffer((8,), "float32")):
    s = T.alloc_buffer((4,), "float32")
    for i in range(8):
        for k in range(4):
            acc[k] = acc[k] + a[i, k]
        for k in range(4):
            s[k] = acc[k] * 2.0
        out[i] = s[0] + s[3]


def _decision(func, loop):
    return next(d for d in thn.build(func, target="llvm").stage(0).plan("fast").decisions if d.loop == loop)


def test_scratch_that_copies_lift_is_tested_to_the_last_buffer_and_privatised():
    i = _decision(two_scratch_rows, "i")
    assert i.strategy == P.LANES and i.copies == ("s", "t"), i.text()
    a = np.random.default_rng(0).standard_normal((8, 4)).astype("float32")
    out = np.zeros(8, "float32")
    thn.build(two_scratch_rows, target="llvm").emulate(a, out, mode="fast")
    t = a[:, ::-1] * np.float32(2) + np.float32(1)
    np.testing.assert_array_equal(out, t[:, 0] + t[:, 1] * t[:, 2] - t[:, 3])


def test_an_overlap_on_a_parameter_keeps_the_loop_serial_and_the_buffers_after_it_untested():
    i = _decision(running_sums, "i")
    assert i.strategy == P.SERIAL
    assert i.reason == "carried dependence on acc: two iterations of i may touch the same element"
    loops = []
    tvm_ffi.structural_walk(running_sums.body, lambda n: loops.append(n) if isinstance(n, tirx.For) else None)
    loop = next(n for n in loops if n.loop_var.name == "i")
    _, every = loop_dependences(loop, {})
    _, first = loop_dependences(loop, {}, fatal=lambda root: True)
    assert len(every) == 2 and list(first) == list(every)[:1]
    a = np.random.default_rng(1).standard_normal((8, 4)).astype("float32")
    acc, out = np.zeros(4, "float32"), np.zeros(8, "float32")
    thn.build(running_sums, target="llvm").emulate(a, acc, out, mode="fast")
    sums = np.zeros(4, "float32")
    want = np.zeros(8, "float32")
    for r in range(8):
        sums = sums + a[r]
        want[r] = sums[0] * np.float32(2) + sums[3] * np.float32(2)
    np.testing.assert_array_equal(acc, sums)
    np.testing.assert_array_equal(out, want)
