"""float32 math as TVM's llvm code computes it, checked bit for bit against the native build.
TVM's llvm code takes ``powf``, ``exp2f``, ``log2f``, ``log10f``, ``atan2f``, ``asinf``... from libm,
whose results numpy's float32 loops missed for 20 % (``powf``) to 50 % (``log10f``) of the values, one
ulp off, which a later ``floor`` or cast to int turns into a wrong integer (18th probe:
``floor(atan2(y, x) * 2**22)``): they are computed in float64 and rounded, which is libm's result
nearly always.  ``tanh`` and ``tan``, which TVM rewrites into ``exp``, ``sin`` and ``cos`` for llvm,
are emulated as rewritten (``stage.intrinsics_as_computed``)."""
import numpy as np
import pytest
import tvm
from tvm import te

import tvm_hybrid_nb as thn

N = 4096
UNARY = {  # function -> (domain, the least share of values bit-identical to the native build)
    "tanh": ((-10, 10), 0.999), "tan": ((-3, 3), 0.97), "cosh": ((-20, 20), 0.85),
    "exp2": ((-20, 20), 0.998), "log2": ((1e-3, 1e3), 0.998), "log10": ((1e-3, 1e3), 0.9),
    "asin": ((-1, 1), 0.9), "acos": ((-1, 1), 0.9), "atan": ((-10, 10), 0.9), "exp": ((-20, 20), 0.998),
}
BINARY = {"pow": ((0.01, 10), (-5, 5), 0.998), "atan2": ((-10, 10), (-10, 10), 0.8)}


def _agreement(got, want) -> float:
    same = (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
    return float(same.mean())


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_math_matches_the_native_llvm_build(name, mode):
    (lo, hi), least = UNARY[name]
    a = te.placeholder((N,), "float32", name="a")
    b = te.compute((N,), lambda i: getattr(tvm.tirx, name)(a[i]), name="b")
    hm = thn.build(te.create_prim_func([a, b]))
    x = np.random.default_rng(0).uniform(lo, hi, N).astype(np.float32)
    native = np.zeros(N, np.float32)
    hm.run_native(x, native)
    emulated = hm.emulate(x, np.zeros(N, np.float32), mode=mode)
    assert _agreement(emulated, native) >= least
    np.testing.assert_allclose(emulated, native, rtol=3e-7, atol=0)  # the rest within an ulp or two


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_math_matches_the_native_llvm_build(name):
    (lo, hi), (lo2, hi2), least = BINARY[name]
    a, c = te.placeholder((N,), "float32", name="a"), te.placeholder((N,), "float32", name="c")
    b = te.compute((N,), lambda i: getattr(tvm.tirx, name)(a[i], c[i]), name="b")
    hm = thn.build(te.create_prim_func([a, c, b]))
    rng = np.random.default_rng(0)
    x, y = rng.uniform(lo, hi, N).astype(np.float32), rng.uniform(lo2, hi2, N).astype(np.float32)
    native = np.zeros(N, np.float32)
    hm.run_native(x, y, native)
    emulated = hm.emulate(x, y, np.zeros(N, np.float32))
    assert _agreement(emulated, native) >= least
    np.testing.assert_allclose(emulated, native, rtol=3e-7, atol=0)


#: float64 math, whose every value TVM's llvm code takes from libm (``exp``, ``sinh``, ``pow``...):
#: bit for bit, the special values (overflow to inf, a domain error's NaN, log of 0) included.
FLOAT64_UNARY = {"exp": (-20, 20), "sinh": (-20, 20), "cosh": (-20, 20), "tanh": (-5, 5), "log": (1e-3, 1e3),
                 "log10": (1e-3, 1e3), "log1p": (-0.5, 10), "asin": (-1, 1), "acos": (-1, 1), "atan": (-10, 10),
                 "asinh": (-10, 10), "acosh": (1, 10), "atanh": (-0.99, 0.99), "exp2": (-20, 20), "sin": (-10, 10),
                 "tan": (-1.5, 1.5)}
SPECIAL = np.array([0.0, -0.0, 800.0, -800.0, np.inf, -np.inf, -1.0, 1.0, 2.0, np.nan])


def _bit_for_bit_with_native(name, dtype, lo, hi, seed):
    """``name`` of ``dtype`` values (uniform in [lo, hi), the special values first): emulated in both
    modes, bit for bit what the native llvm build computes."""
    a = te.placeholder((N,), dtype, name="a")
    b = te.compute((N,), lambda i: getattr(tvm.tirx, name)(a[i]), name="b")
    hm = thn.build(te.create_prim_func([a, b]))
    x = np.random.default_rng(seed).uniform(lo, hi, N).astype(dtype)
    x[:SPECIAL.size] = SPECIAL.astype(dtype)
    native = np.zeros(N, dtype)
    hm.run_native(x, native)
    bits = f"u{np.dtype(dtype).itemsize}"
    for mode in ("fast", "exact"):
        emulated = hm.emulate(x, np.zeros(N, dtype), mode=mode)
        np.testing.assert_array_equal(emulated.view(bits), native.view(bits), err_msg=f"{name} {dtype} {mode}")


@pytest.mark.parametrize("name", sorted(FLOAT64_UNARY))
def test_float64_math_is_the_c_librarys_bit_for_bit(name):
    _bit_for_bit_with_native(name, "float64", *FLOAT64_UNARY[name], seed=1)


def test_float64_pow_and_atan2_are_the_c_librarys_bit_for_bit():
    a, c = te.placeholder((N,), "float64", name="a"), te.placeholder((N,), "float64", name="c")
    b = te.compute((N,), lambda i: tvm.tirx.pow(a[i], c[i]) + tvm.tirx.atan2(c[i], a[i]), name="b")
    hm = thn.build(te.create_prim_func([a, c, b]))
    rng = np.random.default_rng(2)
    x, y = rng.uniform(0.01, 10, N), rng.uniform(-5, 5, N)
    x[:4], y[:4] = [-2.0, 0.0, 1e300, np.nan], [0.5, -1.0, 2.0, 1.0]  # NaN, inf, overflow
    native = np.zeros(N)
    hm.run_native(x, y, native)
    np.testing.assert_array_equal(hm.emulate(x, y, np.zeros(N), mode="fast"), native)


#: float32 math whose glibc function is not correctly rounded (``sinhf``, ``log10f``, ``erff``...): no
#: numpy or float64 computation gives its last bit; the emulation calls it (``runtime.libm_float32``).
FLOAT32_LIBM = {"sinh": (-20, 20), "cosh": (-20, 20), "asinh": (-10, 10), "acosh": (1, 10), "log1p": (-0.5, 10),
                "log10": (1e-3, 1e3), "asin": (-1, 1), "acos": (-1, 1), "atan": (-10, 10), "erf": (-3, 3),
                "sin": (-10, 10), "cos": (-10, 10)}


@pytest.mark.parametrize("name", sorted(FLOAT32_LIBM))
def test_float32_math_glibc_rounds_its_own_way_is_bit_for_bit(name):
    _bit_for_bit_with_native(name, "float32", *FLOAT32_LIBM[name], seed=3)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_small_float_pow_of_special_values_is_the_c_librarys(dtype):
    # numpy's float64 power takes pow(x, 0.5) as a square root: pow(-inf, 0.5) NaN, pow(-0.0, 0.5)
    # -0.0 (so 1 / pow, -inf), where libm's powf gives +inf and +0.0 (20th probe).
    specials = np.array([-np.inf, -2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0, np.inf, np.nan], dtype)
    x, y = (np.ascontiguousarray(v.ravel()) for v in np.meshgrid(specials, np.array(
        [-np.inf, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 3.0, np.inf, np.nan], dtype)))
    a, c = te.placeholder(x.shape, dtype, name="a"), te.placeholder(x.shape, dtype, name="c")
    b = te.compute(x.shape, lambda i: tvm.tirx.pow(a[i], c[i]), name="b")
    d = te.compute(x.shape, lambda i: tvm.tirx.const(1, dtype) / tvm.tirx.pow(a[i], c[i]), name="d")
    hm = thn.build(te.create_prim_func([a, c, b, d]))
    native = [np.zeros(x.shape, dtype), np.zeros(x.shape, dtype)]
    hm.run_native(x, y, *native)
    assert native[0][(x == -np.inf) & (y == 0.5)] == np.inf
    for mode in ("fast", "exact"):
        emulated = [np.zeros(x.shape, dtype), np.zeros(x.shape, dtype)]
        hm.emulate(x, y, *emulated, mode=mode)
        for got, want in zip(emulated, native):
            bits = "int32" if dtype == "float32" else "int16"
            nan = np.isnan(got) & np.isnan(want)  # a NaN's sign and payload: not in question here
            np.testing.assert_array_equal(np.where(nan, 0, got.view(bits)), np.where(nan, 0, want.view(bits)))
