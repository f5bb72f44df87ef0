"""A float -> int conversion out of range is LLVM poison: the emulation reruns the stage with those
values at the type's min, max and zero to see which outputs depend on them.  Those reruns' sums of
the stand-in values are not the kernel's: the overflow sanitizer stays quiet there (T5's relative
position buckets cast log(0) = -inf, add 4, and a select discards the result), while an overflow
of the kernel's own values is still reported."""
import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError


@T.prim_func(s_tir=True)
def discarded_poison(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "int64")):
    T.func_attr({"global_symbol": "main"})
    c = T.alloc_buffer((4,), "int64")
    a = T.alloc_buffer((4,), "int64")
    m = T.alloc_buffer((4,), "int64")
    for i in range(4):
        with T.sblock("cast"):
            vi = T.axis.spatial(4, i)
            c[vi] = T.Cast("int64", T.log(x[vi]))
    for i in range(4):
        with T.sblock("add"):
            vi = T.axis.spatial(4, i)
            a[vi] = c[vi] + T.int64(4)
    for i in range(4):
        with T.sblock("min"):
            vi = T.axis.spatial(4, i)
            m[vi] = T.min(a[vi], T.int64(7))
    for i in range(4):
        with T.sblock("where"):
            vi = T.axis.spatial(4, i)
            y[vi] = T.Select(x[vi] < T.float32(1), T.int64(-1), m[vi])


@T.prim_func(s_tir=True)
def discarded_poison_and_squares(x: T.Buffer((4,), "float32"), n: T.Buffer((4,), "int64"),
                                 y: T.Buffer((4,), "int64"), z: T.Buffer((4,), "int64")):
    T.func_attr({"global_symbol": "main"})
    c = T.alloc_buffer((4,), "int64")
    for i in range(4):
        with T.sblock("cast"):
            vi = T.axis.spatial(4, i)
            c[vi] = T.Cast("int64", T.log(x[vi])) + T.int64(4)
    for i in range(4):
        with T.sblock("where"):
            vi = T.axis.spatial(4, i)
            y[vi] = T.Select(x[vi] < T.float32(1), T.int64(-1), c[vi])
    for i in range(4):
        with T.sblock("square"):
            vi = T.axis.spatial(4, i)
            z[vi] = n[vi] * n[vi]


def _native(func, *arrays):
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    tensors = [tvm.runtime.tensor(a) for a in arrays]
    lib["main"](*tensors)
    return [t.numpy() for t in tensors]


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_discarded_poison_conversion_is_no_overflow(mode):
    x = np.array([0.0, 2.0, 30.0, 0.5], np.float32)  # log(0) = -inf: its int64 conversion is poison
    want = _native(discarded_poison, x, np.zeros(4, np.int64))[1]
    np.testing.assert_array_equal(want, [-1, 4, 7, -1])
    hm = thn.build(discarded_poison, target="llvm")
    for check in (False, True):
        y = np.zeros(4, np.int64)
        hm.emulate(x.copy(), y, stage=0, mode=mode, check=check)
        np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_an_overflow_of_the_kernels_own_values_is_still_reported(mode):
    hm = thn.build(discarded_poison_and_squares, target="llvm")
    x = np.array([0.0, 2.0, 30.0, 0.5], np.float32)
    n = np.array([3, 1 << 40, 5, 7], np.int64)  # (2**40)**2 overflows int64
    with pytest.raises(EmulationError, match=r"int64 overflow: 1099511627776 \* 1099511627776"):
        hm.emulate(x, n, np.zeros(4, np.int64), np.zeros(4, np.int64), stage=0, mode=mode, check=True)
    n[1] = 9
    y, z = np.zeros(4, np.int64), np.zeros(4, np.int64)
    hm.emulate(x, n, y, z, stage=0, mode=mode, check=True)
    np.testing.assert_array_equal(z, n * n)
    np.testing.assert_array_equal(y, [-1, 4, 7, -1])


def _int32_chain(step):
    from tvm import te, tirx

    x = te.placeholder((4,), "float32", name="x")
    c = te.compute((4,), lambda i: tirx.Cast("int32", x[i] * tirx.const(1e10, "float32")), name="c")
    a = te.compute((4,), lambda i: step(c[i]), name="a")
    b = te.compute((4,), lambda i: a[i] + tirx.const(1, "int32"), name="b")
    y = te.compute((4,), lambda i: tirx.Select(tirx.abs(x[i]) < tirx.const(1e-3, "float32"), b[i],
                                               tirx.const(0, "int32")), name="y")
    return te.create_prim_func([x, y]).with_attr("global_symbol", "main")


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("step", ["copy", "add", "mul"])
def test_arithmetic_on_a_discarded_int32_poison_is_no_overflow(mode, step):
    # x * 1e10 out of int32's range is poison; x86 gives INT_MIN (times 3 overflows) or the probes
    # INT_MAX (plus 1 overflows): the select drops every such lane, the output is defined.
    from tvm import tirx

    steps = {"copy": lambda v: v, "add": lambda v: v + tirx.const(4, "int32"),
             "mul": lambda v: v * tirx.const(3, "int32")}
    func = _int32_chain(steps[step])
    x = np.array([0.0, 5.0, -7.0, 1e-4], np.float32)
    want = _native(func, x, np.zeros(4, np.int32))[1]
    small = {"copy": 0, "add": 4, "mul": 0}[step] + 1
    np.testing.assert_array_equal(want, [small, 0, 0, steps_py(step, 1000000) + 1])
    hm = thn.build(func, target="llvm")
    for check in (False, True):
        y = np.zeros(4, np.int32)
        hm.emulate(x.copy(), y, stage=0, mode=mode, check=check)
        np.testing.assert_array_equal(y, want)


def steps_py(step, value):
    return {"copy": value, "add": value + 4, "mul": value * 3}[step]
