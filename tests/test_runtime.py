"""Emulation runtime helpers: TIR semantics checked against independent arithmetic, negatives included."""
from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from tvm_hybrid_nb import runtime
from tvm_hybrid_nb.loader import hybrid_line, load_kernel

PAIRS = [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-6, 3), (0, -5), (-1, 7), (1, -7)]


@pytest.mark.parametrize("a,b", PAIRS)
def test_trunc_and_floor_division_on_python_and_numpy_ints(a, b):
    exact_trunc = int(a / b)  # exact for these small values
    assert runtime.truncdiv(a, b) == exact_trunc
    assert runtime.truncmod(a, b) == a - exact_trunc * b
    assert runtime.floordiv(a, b) == (a - (a % b)) // b
    assert runtime.floormod(a, b) == a - runtime.floordiv(a, b) * b
    for dtype in (np.int8, np.int32, np.int64):
        na, nb = dtype(a), dtype(b)
        q = runtime.truncdiv(na, nb)
        assert q == exact_trunc and np.asarray(q).dtype == dtype
        assert runtime.truncmod(na, nb) == a - exact_trunc * b
    va = np.array([a, -a], np.int32)
    np.testing.assert_array_equal(runtime.truncdiv(va, np.int32(b)), [int(a / b), int(-a / b)])


def test_division_by_zero_raises_instead_of_returning_zero():
    with pytest.raises(ZeroDivisionError):
        runtime.truncdiv(np.int32(3), np.int32(0))
    with pytest.raises(ZeroDivisionError):
        runtime.floormod(np.array([1, 2], np.int32), np.array([1, 0], np.int32))


def test_wrap_is_twos_complement():
    assert runtime.wrap(2 ** 31, "int32") == -2 ** 31
    assert runtime.wrap(-2 ** 31 - 1, "int32") == 2 ** 31 - 1
    assert runtime.wrap(256 + 5, "uint8") == 5
    assert runtime.wrap(-1, "uint16") == 65535
    assert runtime.wrap(12345, "int64") == 12345


def test_cast_matches_c_conversions():
    assert runtime.cast(np.float32(-3.7), "int32") == -3
    assert runtime.cast(np.float32(3.7), "int32") == 3
    assert runtime.cast(np.int32(300), "int8") == 44
    assert runtime.cast(np.int32(-129), "int8") == 127
    assert runtime.cast(np.int32(-1), "uint8") == 255
    assert runtime.cast(2.5, "bool") == np.True_
    out = runtime.cast(np.float64(0.1), "float32")
    assert out.dtype == np.float32 and out == np.float32(0.1)
    assert runtime.cast(np.float32(65520.0), "float16") == np.inf  # rounds past float16 max


_SCALAR_CAST_VALUES = [-3.7, 3.7, -0.5, 0.5, -0.0, 2.0 ** 31, -2.0 ** 31, 2.0 ** 31 - 128, -2.0 ** 31 - 1024,
                       2.0 ** 63, -2.0 ** 63, 2.0 ** 63 - 1024, 1e300, -1e300, np.inf, -np.inf, np.nan]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # 1e300 to float32, on both paths
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
@pytest.mark.parametrize("ftype", [np.float32, np.float64])
def test_a_scalar_cast_is_the_arrays_cast(ftype, dtype):
    """A scalar script casts one value at a time (a bicubic resize: 32 float -> int casts a store);
    its shortcut for in-range values must give the array path's value and type, at the int32 and
    int64 limits, for negatives (truncation toward zero), NaN and infinities included."""
    for value in _SCALAR_CAST_VALUES:
        scalar = ftype(value)
        got, want = runtime.cast(scalar, dtype), runtime.cast(np.array([scalar]), dtype)[0]
        assert type(got) is type(want) and got.tobytes() == want.tobytes(), (scalar, dtype, got, want)
    assert runtime.cast(ftype(-3.7), "int32") == -3 and runtime.cast(ftype(-2.0 ** 31), "int32") == -2 ** 31


def _fixed_point(x, y, left, right, q):
    """round-half-up of x * y * 2**(left - right - q), in exact Python integers."""
    total = right + q
    return ((x << left) * y + (1 << (total - 1))) >> total


@pytest.mark.parametrize("x", [0, 1, -1, 3, -3, 12345, -12345, 2 ** 31 - 1, -2 ** 31, 1 << 20, -(1 << 20) - 1])
@pytest.mark.parametrize("y, s", [(1234567890, -3), (1234567890, 0), (-1234567890, -7), (1 << 29, -1),
                                  (2 ** 31 - 1, -20), (-2 ** 31, -5)])
def test_q_multiply_shift_rounds_half_up_like_integer_arithmetic(x, y, s):
    want = _fixed_point(x, y, max(s, 0), -s if s <= 0 else 0, 31)  # fits int32 for these values
    got = runtime.q_multiply_shift(np.int32(x), np.int32(y), np.int32(31), np.int32(s))
    assert got == want and np.asarray(got).dtype == np.int32
    vector = runtime.q_multiply_shift(np.array([x, -x], np.int64).astype(np.int32), y, 31, np.array([s, s]))
    np.testing.assert_array_equal(vector, [want, _fixed_point(int(np.int32(np.int64(-x))), y, max(s, 0),
                                                                  -s if s <= 0 else 0, 31)])


def test_q_multiply_shift_of_one_half_and_per_axis_and_undefined_shifts():
    # y = 1 << 30: TVM's lowering stays in int32 and ignores q: (x + (1 << -s)) >> (1 - s), or x << (s - 1).
    assert runtime.q_multiply_shift(np.int32(5), 1 << 30, 31, -2, power_of_two=True) == (5 + 4) >> 3
    assert runtime.q_multiply_shift(np.int32(-5), 1 << 30, 7, -2, power_of_two=True) == (-5 + 4) >> 3
    assert runtime.q_multiply_shift(np.int32(2 ** 31 - 1), 1 << 30, 31, 0, power_of_two=True) == -2 ** 30
    assert runtime.q_multiply_shift(np.int32(3), 1 << 30, 31, 3, power_of_two=True) == 12
    assert runtime.q_multiply_shift(np.int32(2 ** 30), 1 << 30, 31, 3, power_of_two=True) == 0  # wraps in int32
    x, y = np.array([-7, 7, 2 ** 20 + 1], np.int32), np.array([3 << 28, -(3 << 28), 1 << 30], np.int32)
    got = runtime.q_multiply_shift_per_axis(x, y, 2, 5, 31, True, True)
    np.testing.assert_array_equal(got, [_fixed_point(int(a), int(b), 2, 5, 31) for a, b in zip(x, y)])
    got = runtime.q_multiply_shift_per_axis(x, y, 2, 5, 31, False, True)
    np.testing.assert_array_equal(got, [_fixed_point(int(a), int(b), 0, 5, 31) for a, b in zip(x, y)])
    with pytest.raises(ValueError, match="undefined"):
        runtime.q_multiply_shift(np.int32(1), 12345, 31, -40)  # a right shift by 71
    with pytest.raises(ValueError, match="undefined"):
        runtime.q_multiply_shift(np.int32(1), 1 << 30, 31, 1, power_of_two=True)  # 1 << -1


def test_packed_return_hands_over_int64_float64_and_bool():
    assert runtime.packed_return(np.int8(-5), "int8") == -5 and type(runtime.packed_return(np.int8(-5), "int8")) is int
    assert runtime.packed_return(np.uint64(2 ** 64 - 1), "uint64") == -1
    assert runtime.packed_return(np.uint32(2 ** 32 - 1), "uint32") == 2 ** 32 - 1
    value = runtime.packed_return(np.float32(0.1), "float32")
    assert type(value) is float and value == float(np.float32(0.1))
    assert runtime.packed_return(np.True_, "bool") is True


def test_float_floor_division_and_mod_keep_dtype():
    a, b = np.float32(-7.5), np.float32(2.0)
    assert runtime.float_floordiv(a, b) == -4.0 and runtime.float_floordiv(a, b).dtype == np.float32
    assert runtime.float_floormod(a, b) == 0.5 and runtime.float_floormod(a, b).dtype == np.float32


def test_min_max_follow_select_semantics_with_nan():
    nan = np.float32(np.nan)
    assert runtime.minimum(nan, np.float32(1)) == 1  # select(nan < 1, nan, 1) -> 1
    assert np.isnan(runtime.minimum(np.float32(1), nan))
    assert runtime.maximum(np.float32(2), np.float32(1)) == 2


def test_math_helpers_stay_in_operand_dtype():
    x = np.float32(0.5)
    assert runtime.rsqrt(x).dtype == np.float32 and runtime.rsqrt(x) == np.float32(1) / np.sqrt(x)
    assert runtime.sigmoid(np.float16(0.5)).dtype == np.float16
    assert runtime.erf(np.float32(0.5)).dtype == np.float32
    assert abs(float(runtime.erf(np.float32(0.5))) - 0.5204998778) < 1e-6
    assert runtime.popcount(np.uint8(0b1011)) == 3


def test_vectors_ramp_broadcast_shuffle():
    np.testing.assert_array_equal(runtime.ramp(3, -2, 4), [3, 1, -1, -3])
    assert runtime.ramp(0, 1, 4, "int64").dtype == np.int64
    np.testing.assert_array_equal(runtime.broadcast(np.float32(1.5), 3, "float32"), [1.5] * 3)
    np.testing.assert_array_equal(runtime.shuffle([np.arange(3), np.arange(3, 6)], [5, 0, 2]), [5, 0, 2])


def test_checked_access_refuses_negative_and_past_end_indices():
    buf = np.arange(8, dtype=np.float32)
    with pytest.raises(IndexError, match=r"out-of-bounds read of A\[-1\]"):
        runtime.load(buf, (-1,), "A")
    with pytest.raises(IndexError, match="out-of-bounds write of A"):
        runtime.store(buf, (np.arange(6, 10),), np.zeros(4, np.float32), "A")
    # Masked-out lanes may be out of bounds; they read 0 and are never used.
    got = runtime.load(buf, (np.arange(6, 10),), "A", mask=np.array([True, True, False, False]))
    np.testing.assert_array_equal(got[:2], [6, 7])
    with pytest.raises(IndexError):
        runtime.load(buf, (np.arange(6, 10),), "A", mask=np.array([True, True, True, False]))


def test_view_shares_storage_and_reinterprets():
    storage = np.zeros(8, np.float32)
    v = runtime.view(storage, "float32", (2, 2), 4)
    v[1, 1] = 5
    assert storage[7] == 5
    bits = runtime.view(storage, "int32", (8,))
    assert bits[7] == np.float32(5).view(np.int32)
    with pytest.raises(IndexError):
        runtime.view(storage, "float32", (4,), 6)


def test_strided_view_addresses_offset_plus_index_times_strides():
    storage = np.arange(20, dtype=np.int32)
    v = runtime.strided_view(storage, "int32", (3, 4), (6, 1), 2)
    assert v[2, 3] == 2 + 2 * 6 + 3
    v[1, 0] = -1  # writes land in the storage
    assert storage[8] == -1
    back = runtime.strided_view(storage, "int32", (4,), (-3,), 19)  # negative strides reach backwards
    np.testing.assert_array_equal(back, [19, 16, 13, 10])
    assert runtime.strided_view(storage, "int32", (0, 4), (6, 1), 50).shape == (0, 4)
    bits = runtime.strided_view(np.zeros(4, np.float32), "int32", (2,), (2,), 1)
    assert bits.dtype == np.int32
    with pytest.raises(IndexError):
        runtime.strided_view(storage, "int32", (3, 4), (6, 1), 5)  # reaches element 20
    with pytest.raises(IndexError):
        runtime.strided_view(storage, "int32", (4,), (-3,), 8)  # reaches element -1
    with pytest.raises(RuntimeError):
        runtime.strided_view(np.zeros((4, 4), np.int32)[:, :2], "int32", (2,), (1,), 0)  # a copy, not a view


def test_helper_sources_are_self_contained():
    names = runtime.helper_closure({"load", "truncdiv", "erf"})
    assert {"_in_bounds", "_bounds_error", "_check_divisor"} <= set(names)
    namespace: dict = {"np": np, "math": __import__("math")}
    exec(runtime.helper_source({"load", "truncdiv", "erf"}), namespace)
    assert namespace["truncdiv"](-7, 2) == -3


def _runtime_modules():
    import pkgutil

    return [importlib.import_module(f"{runtime.__name__}.{m.name}") for m in pkgutil.iter_modules(runtime.__path__)]


def test_every_helper_of_the_runtime_modules_is_a_package_name():
    # The code generator looks helpers up (and reserves their names) in vars(runtime) only.
    modules = _runtime_modules()
    assert {m.__name__.rsplit(".", 1)[1] for m in modules} >= {"_numerics", "_memory", "_lanes", "_gpu", "_sanitizers"}
    for module in modules:
        defined = [n for n, v in vars(module).items()
                   if callable(v) and getattr(v, "__module__", None) == module.__name__]
        assert defined, module.__name__
        for name in defined:
            assert vars(runtime).get(name) is vars(module)[name], f"{module.__name__}.{name} is not re-exported"


def _global_names(code) -> set[str]:
    import dis

    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            names |= _global_names(const)
    return names


def _helper_codes(obj):
    if isinstance(obj, type):
        return [v.__code__ for v in vars(obj).values() if hasattr(v, "__code__")]
    return [obj.__code__]


def test_each_helper_alone_pulls_in_every_helper_it_calls():
    # A script is one flat namespace holding only the helpers of the closure (whatever runtime module
    # defines them), numpy as np, and math where NEEDS_MATH says so: every global name a helper's code
    # loads must be there.
    import builtins
    import math

    helpers = sorted({n for m in _runtime_modules() for n, v in vars(m).items()
                      if callable(v) and getattr(v, "__module__", None) == m.__name__})
    for name in helpers:
        closure = runtime.helper_closure({name})
        namespace: dict = {"np": np}
        if set(closure) & runtime.NEEDS_MATH:
            namespace["math"] = math
        exec(runtime.helper_source({name}), namespace)
        assert set(closure) <= set(namespace), name
        for member in closure:
            obj = getattr(runtime, member)
            for code in _helper_codes(obj):
                missing = {g for g in _global_names(code) if g not in namespace and not hasattr(builtins, g)}
                assert not missing, f"{member} (pulled in by {name}) uses {sorted(missing)}, missing from its script"


def test_loaded_kernels_show_their_lines_in_tracebacks():
    src = "import numpy as np\n\ndef k(a):\n    x = 1\n    return a[10]\n"
    fn = load_kernel(src, "k", label="test")
    with pytest.raises(IndexError) as info:
        fn(np.zeros(3))
    assert hybrid_line(info.value, "k") == (5, "return a[10]")


def test_import_refuses_an_unknown_tvm_ffi_version(monkeypatch):
    from importlib import metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version",
                        lambda name: "0.1.15" if name == "apache-tvm-ffi" else real(name))
    saved = {k: v for k, v in sys.modules.items() if k.startswith("tvm_hybrid_nb")}
    for k in saved:
        del sys.modules[k]
    try:
        with pytest.raises(ImportError, match=r"apache-tvm-ffi 0.1.15 .*pip install 'apache-tvm-ffi==0.1.14.post1'"):
            importlib.import_module("tvm_hybrid_nb")
    finally:
        sys.modules.update(saved)


def test_dimension_expressions_evaluate_like_python_and_refuse_anything_else():
    from tvm_hybrid_nb.signature import dim_symbols, dim_value

    sizes = {"n": 7, "m": -3}
    assert dim_value(5, sizes) == 5 and dim_value("n", sizes) == 7
    assert dim_value("n + 2", sizes) == 9 and dim_value("(n - 1) // 2 + 1", sizes) == 4
    assert dim_value("m // 2", sizes) == -2 and dim_value("m % 2", sizes) == 1  # floor semantics
    assert dim_value("-n * m", sizes) == 21
    assert dim_symbols("n * m + n") == ["n", "m"] and dim_symbols(4) == []
    # relax's dynamic strided slice: (min(100, n) + 1 - min(1, n)) // 2 rows
    assert dim_value("(min(100, n) + 1 - min(1, n)) // 2", sizes) == 3 and dim_value("max(n, m * m)", sizes) == 9
    assert dim_symbols("(min(100, n) + 1 - min(1, n)) // 2") == ["n"]
    # a ceil-mode pool over a symbolic length: if_then_else(n % 2 == 0, n // 2, n // 2 + 1)
    assert dim_value("n // 2 if n % 2 == 0 else n // 2 + 1", sizes) == 4
    assert dim_value("n // 2 if n % 2 == 0 else n // 2 + 1", {"n": 6}) == 3
    assert dim_value("1 if n > 2 and not m >= 1 else 2", sizes) == 1
    assert dim_value("1 if n > 9 or m != -3 else 2", sizes) == 2
    assert dim_symbols("n // 2 if n % 2 == 0 else m") == ["n", "m"]
    with pytest.raises(ValueError, match="condition"):
        dim_value("1 if n else 2", sizes)
    for bad in ("__import__('os').getpid()", "n.bit_length()", "n ** 2", "n / 2", "[n][0]", "min(n)",
                "abs(n)", "min(n, m, 1)"):
        with pytest.raises(ValueError, match="only"):
            dim_value(bad, sizes)
    with pytest.raises(KeyError):
        dim_value("k + 1", sizes)


def test_lanes_view_of_a_non_contiguous_view_uses_its_strides_and_bounds():
    storage = np.arange(64, dtype=np.float32).reshape(8, 8)
    view = storage[2:6, 3:7]  # a match_buffer region
    lanes = runtime.lanes_view(view, (1, 0), ((0, 3, (1, 0)), (1, 4, (0, 1))), ndim=2)
    np.testing.assert_array_equal(lanes, view[1:4, 0:4])
    lanes[...] = -1
    assert (storage[3:6, 3:7] == -1).all() and (storage[2] != -1).all()
    with pytest.raises(IndexError):
        runtime.lanes_view(view, (2, 0), ((0, 3, (1, 0)),), ndim=2)


def test_a_view_of_a_wider_dtype_over_storage_its_itemsize_does_not_divide():
    # StorageRewrite put median's 3 int64 indices into the 84 bytes of 21 float32: flat_view raised
    # numpy's "size must be a divisor" ValueError; the whole int64 elements of the storage are viewed.
    from tvm_hybrid_nb.runtime import flat_view, rows_view, view

    store = np.arange(21, dtype=np.float32)
    v = flat_view(store, "int64", 3, 0)
    assert v.dtype == np.int64 and v.size == 10 and np.shares_memory(v, store)
    v[:3] = [1, 2, 3]
    assert view(store, "int64", (3,), 0).tolist() == [1, 2, 3]
    assert store.view(np.uint8)[:24].view(np.int64).tolist() == [1, 2, 3]
    rows = rows_view(np.zeros((2, 5), np.float32), 1, "int64", (2,), 0)
    assert rows.shape == (2, 2)
    with pytest.raises(IndexError, match="exceeds its storage of 10"):
        flat_view(store, "int64", 11, 0)


def test_unmasked_sanitizer_access_reads_and_writes_as_numpy_indexing():
    # check=True's access() without a mask or race log indexes directly; what it reports goes the long way.
    rng = np.random.default_rng(0)
    buf = rng.standard_normal((4, 5)).astype("float32")
    written = np.zeros((4, 5), bool)
    rows, cols = np.arange(4)[:, None], np.array([[0, 2, 4]])
    runtime.access(buf, (rows, cols), "B", write=True, value=np.float32(7), shadow=written)
    assert (buf[:, [0, 2, 4]] == 7).all() and written[:, [0, 2, 4]].all() and not written[:, [1, 3]].any()
    got = runtime.access(buf, (rows, cols), "B", shadow=written)
    np.testing.assert_array_equal(got, buf[rows, cols])
    got[...] = 0  # a copy, not a view of the buffer
    assert (buf[:, [0, 2, 4]] == 7).all()
    assert runtime.access(buf, (np.int64(2), 4), "B", shadow=written) == np.float32(7)
    with pytest.raises(RuntimeError, match=r"read of B\[0, 1\], an element .* never written"):
        runtime.access(buf, (rows, np.array([[1]])), "B", shadow=written)
    with pytest.raises(IndexError, match=r"out-of-bounds write of B\[0, 5\]"):
        runtime.access(buf, (rows, np.array([[5]])), "B", write=True, value=np.float32(1))
    with pytest.raises(IndexError, match=r"out-of-bounds read of B\[-1, 0\]"):
        runtime.access(buf, (np.int64(-1), 0), "B")


def test_masked_and_tainted_sanitizer_accesses_without_a_race_log():
    # A thread's own memory read under a mask, or while a never-written value is carried
    # (MemorySanitizer's rule), is indexed directly; what the numbers say is the truth.
    lane = np.arange(8)
    buf = np.arange(8, dtype=np.float32) * 10
    written = lane < 5
    # masked-out lanes (a Select's other arm, computed natively too) read the memory as load() does,
    # even past the written part; only kept lanes are checked
    got = runtime.access(buf, (lane,), "R", mask=lane < 5, shadow=written)
    np.testing.assert_array_equal(got, buf)
    np.testing.assert_array_equal(runtime.access(buf, (lane,), "R", mask=lane < 5, shadow=written),
                                  runtime.load(buf, (lane,), "R", mask=lane < 5))
    assert got.dtype == np.float32
    with pytest.raises(RuntimeError, match=r"read of R\[5\], an element .* never written"):
        runtime.access(buf, (lane,), "R", mask=lane < 7, shadow=written)
    # with a poison log the never-written kept lanes are remembered, the others are not
    log = runtime.RaceLog()
    runtime.access(buf, (lane,), "R", mask=lane < 7, shadow=written, poison=log)
    np.testing.assert_array_equal(log.pending, (lane >= 5) & (lane < 7))
    # ... and a write of that value keeps those elements "never written"
    out, out_written = np.zeros(8, np.float32), np.zeros(8, bool)
    runtime.access(out, (lane,), "O", write=True, value=np.ones(8, np.float32), shadow=out_written, poison=log)
    np.testing.assert_array_equal(out_written, ~((lane >= 5) & (lane < 7)))
    assert log.pending is None and (out == 1).all()
    # an unmasked read of partly written memory taints the unwritten lanes
    runtime.access(buf, (lane,), "R", shadow=written, poison=log)
    np.testing.assert_array_equal(log.pending, ~written)


def test_a_masked_write_of_many_lanes_to_one_element_keeps_the_kept_lanes_value():
    # LowerThreadAllreduce's `red_result[0] = red_buf0[tx]` where tx == 0: all lanes index element 0.
    lane = np.arange(8)
    res, res_written = np.full(1, -1.0, np.float32), np.zeros(1, bool)
    runtime.access(res, (np.zeros(8, np.int64),), "res", write=True, value=lane.astype(np.float32) + 3,
                   mask=lane == 0, shadow=res_written)
    assert res[0] == 3 and res_written[0]


def test_one_access_of_two_lanes_writing_one_element_is_a_race_unless_the_values_agree():
    lanes = ((0, 4, "threadIdx.x"),)
    lane = np.arange(4).reshape(4, *[1] * 11)  # the generated code's lane array for threadIdx.x on axis 0
    log = runtime.RaceLog()
    runtime.access(np.zeros(4, np.float32), (lane,), "S", write=True, value=lane.astype(np.float32), log=log,
                   lanes=lanes)  # each lane its own element
    runtime.access(np.zeros(4, np.float32), (lane,), "S", write=True, value=np.float32(0), mask=lane < 2, log=log,
                   lanes=lanes)
    runtime.access(np.zeros(2, np.float32), (lane // 2,), "S2", write=True, value=np.float32(1), log=log,
                   lanes=lanes)  # two lanes an element, one value: harmless
    with pytest.raises(RuntimeError, match=r"data race on S3\[0\]: lanes \(threadIdx.x=0\) and \(threadIdx.x=1\)"):
        runtime.access(np.zeros(2, np.float32), (lane // 2,), "S3", write=True, value=lane.astype(np.float32),
                       log=log, lanes=lanes)


def test_a_large_allocation_starts_at_zero_and_keeps_what_is_written():
    # alloc() maps buffers of 16 MiB and more without transparent huge pages (a sparse touch zeroes
    # 4 KiB, not 2 MiB): the buffer must behave exactly as np.zeros' would.
    shape = (1024, 1024, 5)  # 20 MiB of float32
    buf = runtime.alloc(shape, "float32")
    assert buf.shape == shape and buf.dtype == np.float32 and buf.flags.writeable and buf.flags.c_contiguous
    lane = np.arange(1024)
    buf[lane, lane, 3] = lane  # each lane its own row, as per-thread copies are used
    expected = np.zeros(shape, np.float32)
    expected[lane, lane, 3] = lane
    np.testing.assert_array_equal(buf, expected)
    flat = runtime.view(buf, "float32", (1024 * 1024 * 5,))
    flat[7] = 2.5  # a view shares the storage
    assert buf[0, 1, 2] == 2.5
    assert runtime.alloc((4, 2**22), "bool").sum() == 0


def test_bounds_of_index_arrays_of_every_integer_type_hold_for_negatives_and_wide_extents():
    """``_in_bounds`` reads a signed index as unsigned (one comparison) only where every negative
    value then lands past the extent; the answer is the two comparisons' everywhere."""
    from tvm_hybrid_nb.runtime import _in_bounds, load

    rng = np.random.default_rng(0)
    for dtype in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        info = np.iinfo(dtype)
        for extent in (1, 7, 100, 200, 40000):
            rows = rng.integers(max(info.min, -300), min(info.max, 300) + 1, (5, 1)).astype(dtype)
            cols = np.array([info.min, -1 if info.min < 0 else 0, 0, 3, info.max], dtype=dtype)
            buffer = np.zeros((extent, 9))
            got = _in_bounds(buffer, (rows, cols % 9 if info.min >= 0 else cols))
            want = ((rows.astype(np.int64) >= 0) & (rows.astype(np.int64) < extent)
                    & (cols.astype(float) >= 0) & (cols.astype(float) < 9)) if info.min < 0 else (
                (rows.astype(float) < extent) & np.ones_like(cols, dtype=bool))
            np.testing.assert_array_equal(got, want, err_msg=f"{dtype} extent {extent}")
    with pytest.raises(IndexError, match="out-of-bounds read"):
        load(np.zeros(8), (np.array([0, 3, -1], dtype=np.int64),))
    np.testing.assert_array_equal(load(np.arange(8.0), (np.array([0, 3, 7], dtype=np.int32),)), [0.0, 3.0, 7.0])


@pytest.mark.parametrize("layout", [np.ascontiguousarray, np.asfortranarray])
@pytest.mark.parametrize("kept_rows", [[2, 3, 4], [0, 5], [], [0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [5]])
def test_a_masked_store_writes_the_kept_lanes_in_order_as_an_element_loop_would(kept_rows, layout):
    # The mask of a triangle's looping rows varies along one axis (a run of rows: those rows are
    # stored; rows apart: the lanes are picked), and lanes that write one element write it in the
    # lanes' order, whatever the arrays' memory order: the last kept lane's value stays.
    rng = np.random.default_rng(len(kept_rows))
    rows = np.arange(6).reshape(6, 1)
    mask = np.isin(rows, kept_rows)
    # (1, 2) and (5, 0) both write element 5: in column-major order (1, 2) would come last.
    index = layout((rows * 3 + np.arange(4).reshape(1, 4)) % 10)
    value = layout(rng.standard_normal((6, 4)).astype(np.float32))
    got, want = np.zeros(10, np.float32), np.zeros(10, np.float32)
    runtime.store(got, (index,), value, "B", mask=mask)
    for r in range(6):
        for c in range(4):
            if mask[r, 0]:
                want[index[r, c]] = value[r, c]
    np.testing.assert_array_equal(got, want)
    with pytest.raises(IndexError, match=r"out-of-bounds write of B\[10\]"):
        runtime.store(np.zeros(10, np.float32), (index + 5,), value, "B", mask=np.ones((6, 1), bool))


@pytest.mark.parametrize("mask_rows", [[1, 2, 3], [0, 2, 5]])  # a run of rows (sliced) or rows apart (picked)
def test_a_masked_store_with_scalar_indices_beside_lane_arrays_writes_as_an_element_loop_would(mask_rows):
    # A thread's own copy of a local buffer, ``buf[0, tx, 0, by]``: the scalar indices stay numbers
    # beside the kept lanes of the index arrays; lanes that write one element write it in order.
    rng = np.random.default_rng(len(mask_rows))
    tx, by = np.arange(6).reshape(6, 1), np.array([[0, 1, 1, 2]])  # by repeats: (t, 1) and (t, 2) collide
    mask = np.isin(tx, mask_rows) & np.ones((1, 4), bool)
    value = rng.standard_normal((6, 4)).astype(np.float32)
    got, want = np.zeros((1, 6, 2, 3), np.float32), np.zeros((1, 6, 2, 3), np.float32)
    runtime.store(got, (0, tx, 1, by), value, "buf", mask=mask)
    for t in range(6):
        for c in range(4):
            if mask[t, c]:
                want[0, t, 1, by[0, c]] = value[t, c]
    np.testing.assert_array_equal(got, want)
    one = np.zeros(3, np.float32)  # every index a number: the last kept lane's value stays
    runtime.store(one, (2,), value, "one", mask=mask)
    assert one[2] == value[mask][-1]
    with pytest.raises(IndexError, match=rf"out-of-bounds write of buf\[0, {mask_rows[0]}, 2, 0\]"):
        runtime.store(got, (0, tx, 2, by), value, "buf", mask=mask)
