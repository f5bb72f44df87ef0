"""TVM's llvm code generator emits 32- and 64-bit integer add/sub/mul with ``nsw`` (signed) or ``nuw``
(unsigned): a result that overflows is poison, and LLVM folds what depends on it.  A uint32 hash
``clz(x * 2654435761 + 0x9E3779B9)`` compiles to 0 for every x (``nuw`` says the sum is at least
0x9E3779B9, whose top bit is set).  The emulation wraps; the sanitizer (check=True) names the overflow,
as it names out-of-range shift counts."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import te, tirx
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError

MODES = ("exact", "fast")


def _kernel(fn, dtype="int32", out="int32", n=6):
    a = te.placeholder((n,), dtype, name="a")
    b = te.compute((n,), lambda i: fn(a[i]), name="b")
    return thn.build(te.create_prim_func([a, b]).with_attr("global_symbol", "main"), target="llvm")


def _hash_clz(x):
    k, c = tirx.const(2654435761, "uint32"), tirx.const(0x9E3779B9, "uint32")
    return tirx.clz(tirx.Cast("uint32", x) * k + c)


def test_native_llvm_folds_an_overflowing_uint32_hash():
    hm = _kernel(_hash_clz)
    a = np.array([70, 28, 2, -46, -39, -92], "int32")
    wrapped = (a.astype(np.int64) % 2**32 * 2654435761 + 0x9E3779B9) % 2**32
    truth = np.array([32 - int(v).bit_length() for v in wrapped], "int32")  # 2 for -46
    native = hm.run_native(a.copy(), np.zeros(6, "int32"))
    assert not np.array_equal(native, truth)  # if this fails, TVM stopped emitting nuw
    for mode in MODES:
        np.testing.assert_array_equal(hm.emulate(a.copy(), np.zeros(6, "int32"), mode=mode), truth)
        with pytest.raises(EmulationError, match=r"uint32 overflow: \d+ \* 2654435761 = \d+, outside .*nuw"):
            hm.emulate(a.copy(), np.zeros(6, "int32"), mode=mode, check=True)


@pytest.mark.parametrize("dtype, fn, ok, bad", [
    ("int32", lambda x: x * 40000000, [1, -50, 53, 0], [1, -50, 54, 0]),
    ("int32", lambda x: x + 2147483600, [1, 47, -5, 0], [1, 48, -5, 0]),
    ("uint32", lambda x: x - tirx.const(3, "uint32"), [3, 4, 100, 7], [3, 4, 2, 7]),
    ("int64", lambda x: x * tirx.const(1 << 40, "int64"), [1, -8388608, 3, 0], [1, -8388609, 3, 0]),
])
def test_the_sanitizer_names_integer_overflow(dtype, fn, ok, bad):
    hm = _kernel(fn, dtype, dtype, n=4)
    x = np.array(ok, dtype)
    native = hm.run_native(x.copy(), np.zeros(4, dtype))
    for mode in MODES:
        np.testing.assert_array_equal(hm.emulate(x.copy(), np.zeros(4, dtype), mode=mode, check=True), native)
        with pytest.raises(EmulationError, match=f"{dtype} overflow"):
            hm.emulate(np.array(bad, dtype), np.zeros(4, dtype), mode=mode, check=True)
        # without the sanitizer the emulation wraps, as before
        hm.emulate(np.array(bad, dtype), np.zeros(4, dtype), mode=mode)


def test_narrow_integers_and_untaken_lanes_are_not_flagged():
    # int16 arithmetic is emitted without nsw: it wraps natively
    hm = _kernel(lambda x: x * tirx.const(300, "int16"), "int16", "int16", n=4)
    x = np.array([300, -300, 7, 1000], "int16")
    native = hm.run_native(x.copy(), np.zeros(4, "int16"))
    for mode in MODES:
        np.testing.assert_array_equal(hm.emulate(x.copy(), np.zeros(4, "int16"), mode=mode, check=True), native)
    # the untaken arm of a lazy if_then_else is not evaluated natively
    hm = _kernel(lambda x: tirx.if_then_else(x < 1000, x * 1000000, x), n=4)
    x = np.array([5, 3000000, -7, 999], "int32")
    native = hm.run_native(x.copy(), np.zeros(4, "int32"))
    for mode in MODES:
        np.testing.assert_array_equal(hm.emulate(x.copy(), np.zeros(4, "int32"), mode=mode, check=True), native)


def _cuda_kernel(fn, dtype, n=64):
    from tvm_hybrid_nb import zoo

    a = te.placeholder((n,), dtype, name="a")
    func = te.create_prim_func([a, te.compute((n,), lambda i: fn(a[i]), name="b")]).with_attr("global_symbol", "main")
    _target, mod = zoo.schedule(func, "dlight-gpu")
    hm = thn.build(mod["main"], target="cuda")
    return hm, [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]


def test_cuda_wraps_unsigned_arithmetic_and_leaves_signed_overflow_undefined():
    # CUDA C: unsigned arithmetic wraps (a hash is fine), signed overflow is undefined behaviour.
    hm, stages = _cuda_kernel(lambda x: x * tirx.const(2654435761, "uint32") + tirx.const(0x9E3779B9, "uint32"),
                              "uint32")
    assert any(s.name == "tirx.ConvertSSA" for s in stages)  # the host launching the device kernel
    x = np.random.default_rng(1).integers(0, 2**32, 64, dtype=np.uint64).astype("uint32")
    want = ((x.astype(object) * 2654435761 + 0x9E3779B9) % 2**32).astype("uint32")
    for stage in stages:
        for mode in MODES:
            out = hm.emulate(x.copy(), np.zeros(64, "uint32"), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, want, err_msg=f"{stage.label} {mode}")
    hm, stages = _cuda_kernel(lambda x: x * 40000000, "int32")
    ok, bad = np.arange(64, dtype="int32") - 32, np.arange(64, dtype="int32")
    for stage in stages:
        for mode in MODES:
            np.testing.assert_array_equal(
                hm.emulate(ok, np.zeros(64, "int32"), stage=stage.index, mode=mode, check=True), ok * 40000000)
            with pytest.raises(EmulationError, match="int32 overflow"):
                hm.emulate(bad, np.zeros(64, "int32"), stage=stage.index, mode=mode, check=True)


@T.prim_func
def _select_of_an_overflowing_arm(A: T.Buffer((64,), "int32"), B: T.Buffer((64,), "int32")):
    for i in T.parallel(8):
        for j in T.vectorized(8):
            B[i * 8 + j] = T.Select(A[i * 8 + j] < 1000, A[i * 8 + j] * 2000000, 0)


def test_an_overflow_in_lanes_a_select_does_not_choose_is_harmless():
    # LLVM's ``select c, poison, x`` is x where c is false: the native result is exact.
    hm = thn.build(_select_of_an_overflowing_arm, target="llvm")
    a = np.arange(64, dtype="int32") * 100
    want = np.where(a < 1000, a.astype(np.int64) * 2000000, 0).astype("int32")
    np.testing.assert_array_equal(hm.run_native(a.copy(), np.zeros(64, "int32")), want)
    stages = [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]
    assert any(s.name == "tirx.VectorizeLoop" for s in stages)  # a vector Select from there on
    for stage in stages:
        for mode in MODES:
            out = hm.emulate(a.copy(), np.zeros(64, "int32"), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, want, err_msg=f"{stage.label} {mode}")
    with pytest.raises(EmulationError, match="int32 overflow"):  # where the Select chooses it, it is poison
        hm.emulate(a - 3000, np.zeros(64, "int32"), stage=stages[-1].index, mode="fast", check=True)
