"""Guarantees of compare / run_native / stage lookup / build: right or refused, promptly, without leaks.

Each answer is checked against an independent truth (numpy, or the natively compiled kernel); each
refusal is one line that names the parameter, the output or the stages involved.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import ml_dtypes
import numpy as np
import pytest
import tvm
from tvm import te

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.compare import compare_arrays, default_tolerance
from tvm_hybrid_nb.errors import (ArgumentShapeError, ArgumentTypeError, CompareError, DeviceUnavailableError,
                                  HybridError, StageLookupError)
from tvm_hybrid_nb.examples import GPU_EXAMPLES


def _elementwise(fn, n=8, dtype="float32", out_dtype=None, name="B"):
    A = te.placeholder((n,), dtype, name="A")
    B = te.compute((n,), lambda i: fn(A[i]), name=name)
    return te.create_prim_func([A, B])


_CACHE: dict = {}


def doubled(dtype="float32"):
    """B = 2 * A over (8,), built once per dtype."""
    if dtype not in _CACHE:
        _CACHE[dtype] = thn.build(_elementwise(lambda a: a * tvm.tirx.const(2, dtype), dtype=dtype))
    return _CACHE[dtype]


def assert_one_line(exc_info, *fragments):
    text = str(exc_info.value)
    assert "\n" not in text, text
    assert isinstance(exc_info.value, HybridError)
    for fragment in fragments:
        assert fragment in text, text


# ----------------------------------------------------------------------------- native symbol
def test_a_module_key_that_is_not_the_functions_global_symbol_runs_natively():
    func = _elementwise(lambda a: a * 2.0)
    assert str(func.attrs["global_symbol"]) == "main"
    hm = thn.build(tvm.IRModule({"scale2": func}))
    x = np.linspace(-3, 3, 8).astype(np.float32)
    out = hm.run_native(x, np.zeros(8, np.float32))
    np.testing.assert_array_equal(out, 2 * x)
    assert hm.compare(x, np.zeros(8, np.float32)).ok


@pytest.mark.parametrize("name, truth", [("scale2", lambda x: 2 * x), ("plus1", lambda x: x + 1)])
def test_each_function_of_a_multi_function_module_runs_natively(name, truth):
    mod = tvm.IRModule({"scale2": _elementwise(lambda a: a * 2.0),  # both still named "main" inside
                        "plus1": _elementwise(lambda a: a + 1.0)})
    hm = thn.build(mod, name=name)
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(hm.run_native(x, np.zeros(8, np.float32)), truth(x))
    assert hm.compare(x, np.zeros(8, np.float32)).ok


# ----------------------------------------------------------------------------- narrow floats
def test_bfloat16_output_off_by_half_is_a_mismatch_with_the_real_error():
    bf16 = ml_dtypes.bfloat16
    hm = doubled("bfloat16")
    x = np.linspace(-2, 2, 8).astype(bf16)
    assert hm.compare(x, np.zeros(8, bf16)).ok  # emulation vs native

    def off_by_half(a):
        return (a.astype(np.float32) * 2 + 0.5).astype(bf16)

    truth = np.abs(off_by_half(x).astype(np.float64) - 2 * x.astype(np.float64))
    result = hm.compare(x, np.zeros(8, bf16), reference=off_by_half)
    assert not result.ok and str(result).startswith("MISMATCH")
    (out,) = result.outputs
    assert out.max_abs_error == pytest.approx(truth.max()) and out.max_abs_error >= 0.49
    assert out.mismatches == int(np.count_nonzero(truth > 1e-3 + 1e-2 * 2 * np.abs(x.astype(np.float64))))


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_mismatch_reports_the_decoded_max_abs_error(dtype):
    f8 = getattr(ml_dtypes, dtype)
    hm = doubled(dtype)
    x = np.array([0.25, 0.375, 0.5, 0.625, -0.25, -0.375, -0.5, -0.625]).astype(f8)  # exact in both
    assert hm.compare(x, np.zeros(8, f8)).ok

    def tripled(a):
        return (a.astype(np.float32) * 3).astype(f8)

    result = hm.compare(x, np.zeros(8, f8), reference=tripled)
    expected = tripled(x).astype(np.float64)
    truth = np.abs(expected - (2 * x.astype(np.float64)))
    rtol, atol = default_tolerance(np.dtype(f8))
    (out,) = result.outputs
    assert not result.ok and out.mismatches == int(np.count_nonzero(truth > atol + rtol * np.abs(expected))) >= 4
    assert out.max_abs_error == pytest.approx(truth.max()) and out.max_abs_error >= 0.25


def _ulps_up(values, dtype, n):
    """``values`` (positive, normal) moved up by ``n`` units in the last place of ``dtype``."""
    bits = values.astype(dtype).view(np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint8)
    return (bits + n).view(dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_narrow_float_tolerance_allows_one_ulp_but_not_four(dtype):
    np_dtype = np.dtype(getattr(ml_dtypes, dtype, dtype))
    rtol, atol = default_tolerance(np_dtype)
    assert 0 < rtol < 0.5 and 0 <= atol < 0.1
    values = np.array([1.0, 1.25, 1.5, 1.75]).astype(np_dtype)
    assert compare_arrays("B", values, _ulps_up(values, np_dtype, 1)).ok
    far = compare_arrays("B", values, _ulps_up(values, np_dtype, 4))
    assert far.mismatches == 4 and far.max_abs_error > 0


# ----------------------------------------------------------------------------- tolerances
@pytest.mark.parametrize("param", ["rtol", "atol"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), -1e-3, "1e-3", True, [0.1]])
def test_a_tolerance_that_is_not_a_finite_non_negative_number_is_refused(param, value):
    hm = doubled()

    def off_by_100(a):
        return 2 * a + 100

    with pytest.raises(ValueError) as info:
        hm.compare(reference=off_by_100, **{param: value})
    assert_one_line(info, param)
    assert not hm.compare(reference=off_by_100, **{param: 0.0}).ok  # zero is a valid tolerance


# ----------------------------------------------------------------------------- reference outputs
@pytest.mark.parametrize("returned, fragments", [
    (lambda a: np.float32(3.0), ["B", "()", "(8,)"]),
    (lambda a: np.zeros(1, np.float32), ["B", "(1,)", "(8,)"]),
    (lambda a: np.zeros(5, np.float32), ["B", "(5,)", "(8,)"]),
    (lambda a: np.zeros((8, 1), np.float32), ["B", "(8, 1)", "(8,)"]),
    (lambda a: 2 * a.reshape(1, 8), ["B", "(1, 8)", "(8,)"]),
    (lambda a: None, ["None", "B"]),
    (lambda a: (2 * a, 2 * a), ["2 outputs", "B"]),
    (lambda a: (), ["0 outputs", "B"]),
    (lambda a: "twice", ["B", "str"]),
    (lambda a: {"B": 2 * a}, ["B", "dict"]),
    (lambda a: [[[1, 2], [3]]], ["B", "list", "not an array"]),
    (lambda a: (2 * a).astype(np.complex64), ["B", "complex64"]),
    (lambda a: np.array([object()] * 8), ["B", "object"]),
])
def test_a_reference_output_of_the_wrong_kind_shape_or_count_is_refused(returned, fragments):
    hm = doubled()
    with pytest.raises(CompareError) as info:
        hm.compare(reference=returned)
    assert_one_line(info, *fragments)
    assert hm.compare().ok  # the module still works


def test_an_integer_output_refuses_a_float_reference_but_takes_wider_integers():
    hm = doubled("int32")
    x = np.arange(-4, 4, dtype=np.int32)
    with pytest.raises(CompareError) as info:
        hm.compare(x, np.zeros(8, np.int32), reference=lambda a: 2.0 * a)
    assert_one_line(info, "B", "float64", "int32")
    assert hm.compare(x, np.zeros(8, np.int32), reference=lambda a: 2 * a.astype(np.int64)).ok
    wrong = hm.compare(x, np.zeros(8, np.int32), reference=lambda a: 2 * a.astype(np.int64) + (a == 3))
    assert wrong.outputs[0].mismatches == 1 and wrong.outputs[0].first_mismatch == (7,)


def test_a_float_output_compares_with_wider_or_integer_references_by_value():
    hm = doubled()
    x = np.arange(-4, 4, dtype=np.float32)
    assert hm.compare(x, np.zeros(8, np.float32), reference=lambda a: 2 * a.astype(np.float64)).ok
    assert hm.compare(x, np.zeros(8, np.float32), reference=lambda a: 2 * a.astype(np.int64)).ok
    off = hm.compare(x, np.zeros(8, np.float32), reference=lambda a: 2 * a.astype(np.float64) + 0.25)
    assert off.outputs[0].mismatches == 8 and off.outputs[0].max_abs_error == pytest.approx(0.25)


def test_a_reference_that_mutates_its_inputs_corrupts_neither_the_user_arrays_nor_later_runs():
    hm = doubled()
    x = np.arange(8, dtype=np.float32)
    out = np.full(8, 7, np.float32)
    keep_x, keep_out = x.copy(), out.copy()

    def vandal(a):
        result = 2 * a
        a[...] = 1e6  # writes into what it was given
        return result

    assert hm.compare(x, out, reference=vandal).ok
    np.testing.assert_array_equal(x, keep_x)
    np.testing.assert_array_equal(out, keep_out)
    result = hm.compare(x, out)  # then the native run sees the untouched inputs
    assert result.ok
    np.testing.assert_array_equal(hm.run_native(x, out.copy()), 2 * keep_x)


@pytest.mark.parametrize("arrays, error, fragment", [
    ((np.zeros(5, np.float32), np.zeros(8, np.float32)), ArgumentShapeError, "A"),
    ((np.zeros(8, np.float32), np.zeros((8, 1), np.float32)), ArgumentShapeError, "B"),
    ((np.zeros(8, np.float64), np.zeros(8, np.float32)), ArgumentTypeError, "A"),
    ((np.zeros(8, np.float32),), ValueError, "B"),
    (([0.0] * 8, np.zeros(8, np.float32)), ArgumentTypeError, "A"),
])
def test_compare_with_wrong_arrays_names_the_parameter(arrays, error, fragment):
    hm = doubled()
    with pytest.raises(error) as info:
        hm.compare(*arrays)
    assert_one_line(info, fragment)


# ----------------------------------------------------------------------------- special values
def test_nan_inf_and_signed_zero_compare_by_ieee_meaning():
    a = np.array([np.nan, np.inf, -np.inf, -0.0, 1.0, np.nan, np.inf, 2.0], np.float32)
    same = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0, np.nan, np.inf, 2.0], np.float32)
    assert compare_arrays("B", a, same).ok
    other = same.copy()
    other[5] = 1.0       # NaN on one side only
    other[6] = -np.inf   # inf against -inf
    other[7] = np.nan    # a number against NaN
    result = compare_arrays("B", a, other)
    assert result.mismatches == 3 and result.first_mismatch == (5,)
    assert result.max_abs_error == np.inf


def test_nan_and_inf_through_a_kernel_match_native_and_numpy():
    hm = doubled()
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e38, -1e38, 3.0], np.float32)
    assert hm.compare(x, np.zeros(8, np.float32)).ok
    assert hm.compare(x, np.zeros(8, np.float32), reference=lambda a: 2 * a).ok
    bad = hm.compare(x, np.zeros(8, np.float32), reference=lambda a: np.where(np.isnan(a), 0, 2 * a))
    assert bad.outputs[0].mismatches == 1 and bad.outputs[0].first_mismatch == (0,)


def test_huge_integers_are_compared_exactly_with_a_true_error():
    big = np.array([2**62, -(2**62), 2**63 - 1, -(2**63), 0, 1, -1, 7], np.int64)
    off = big.copy()
    off[2] -= 1
    result = compare_arrays("B", big, off)
    assert result.mismatches == 1 and result.first_mismatch == (2,) and result.max_abs_error == 1.0
    ends = compare_arrays("B", np.array([2**63 - 1], np.int64), np.array([-(2**63)], np.int64))
    assert ends.mismatches == 1 and ends.max_abs_error == pytest.approx(2.0**64)
    unsigned = np.array([2**64 - 1, 2**63 + 1, 5], np.uint64)
    near = compare_arrays("B", unsigned, np.array([2**64 - 1, 2**63, 5], np.uint64))
    assert near.mismatches == 1 and near.max_abs_error == 1.0
    mixed = compare_arrays("B", unsigned, np.array([-1, 2**62, 5], np.int64))
    assert mixed.mismatches == 2 and mixed.first_mismatch == (0,)
    assert compare_arrays("B", np.array([3, 2**62], np.int64), np.array([3, 2**62], np.uint64)).ok


def test_huge_integers_through_a_kernel():
    hm = doubled("int64")
    x = np.array([2**61, -(2**61), 2**62 - 1, 3, -3, 0, 1, 2**40], np.int64)
    assert hm.compare(x, np.zeros(8, np.int64)).ok
    result = hm.compare(x, np.zeros(8, np.int64), reference=lambda a: 2 * a + (a == 2**61))
    assert result.outputs[0].mismatches == 1 and result.outputs[0].max_abs_error == 1.0


# ----------------------------------------------------------------------------- stage keys
def test_an_ambiguous_pass_name_lists_every_matching_stage():
    hm = doubled()
    names = [s.name for s in hm.stages]
    duplicated = {n for n in names if names.count(n) > 1}
    assert "s_tir.StmtSimplify" in duplicated
    for name in duplicated:
        with pytest.raises(StageLookupError) as info:
            hm.stage(name)
        assert_one_line(info, *[f"{i} ({name})" for i, n in enumerate(names) if n == name])
    short = [s.index for s in hm.stages if s.short_name == "StmtSimplify"]
    assert len({hm.stages[i].name for i in short}) == 2  # s_tir. and tirx.
    with pytest.raises(StageLookupError) as info:
        hm.stage("StmtSimplify")
    assert_one_line(info, *[f"{i} (" for i in short])
    for stage in hm.stages:  # unique names and every label still resolve
        assert hm.stage(stage.label) is stage
        if names.count(stage.name) == 1:
            assert hm.stage(stage.name) is stage


def test_stage_keys_of_the_wrong_kind_or_range_are_refused():
    hm = doubled()
    other = doubled("int32")
    n = len(hm.stages)
    assert hm.stage(-1) is hm.stages[-1] and hm.stage(-n) is hm.stages[0]
    assert hm.stage(np.int64(2)) is hm.stages[2] and hm.stage(hm.stages[3]) is hm.stages[3]
    for key, fragment in [(n, str(n)), (-n - 1, str(-n - 1)), (True, "bool"), (1.0, "float"), (None, "NoneType"),
                          ("NoSuchPass", "NoSuchPass"), ("", "''"), (other.stages[2], "another module")]:
        with pytest.raises(StageLookupError) as info:
            hm.stage(key)
        assert_one_line(info, fragment)
        with pytest.raises(StageLookupError):
            hm.compare(stage=key)


# ----------------------------------------------------------------------------- threads
def test_two_threads_emulating_one_module_get_their_own_results_and_progress():
    func = _elementwise(lambda a: a * 3.0 + 1.0, n=64)
    hm = thn.build(func)  # fresh: both threads also race to generate the kernel
    start = threading.Barrier(2)
    reports: dict[int, list] = {0: [], 1: []}
    outputs: dict[int, np.ndarray] = {}
    errors = []

    def work(k):
        try:
            x = np.arange(64, dtype=np.float32) * (k + 1)
            start.wait()
            for _ in range(3):
                out = hm.emulate(x, np.zeros(64, np.float32), mode="exact",
                                 progress=lambda f, k=k: (reports[k].append(f), threading.Event().wait(0.0005)))
            outputs[k] = (x, out.copy())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for k in range(2):
        x, out = outputs[k]
        np.testing.assert_array_equal(out, x * np.float32(3) + np.float32(1))
        assert len(reports[k]) >= 3 * 32 and reports[k][-1] == pytest.approx(1.0)
        assert all(0 < f <= 1 for f in reports[k])


# ----------------------------------------------------------------------------- devices
def test_compare_of_a_cuda_build_without_a_gpu_says_how_to_compare_instead():
    example = next(iter(GPU_EXAMPLES.values()))()
    hm = thn.build(example.obj, target="cuda")
    args = example.inputs(hm, seed=1)
    if tvm.cuda().exist:  # with a GPU the native kernel is the reference
        assert hm.compare(*args).ok
        return
    for call in (lambda: hm.compare(*args), lambda: hm.run_native(*args)):
        with pytest.raises(DeviceUnavailableError) as info:
            call()
        assert_one_line(info, "no CUDA device", "reference=")
    assert hm.compare(*args, reference=example.reference).ok  # the way it suggests works


# ----------------------------------------------------------------------------- interrupts, memory
_INTERRUPT_SCRIPT = textwrap.dedent("""
    import signal, threading, time
    from tvm import te
    import tvm_hybrid_nb as thn

    A = te.placeholder((64,), "float32", name="A")
    t = A
    for k in range(200):  # a chain of 200 stages: the build takes seconds (LLVM most of them)
        t = (lambda src, k=k: te.compute((64,), lambda i: src[i] * 2 + 1, name=f"T{k}"))(t)
    tensors = [A, t]
    for trial in range(6):
        sent = {}
        def fire():
            sent["t"] = time.perf_counter()
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        timer = threading.Timer(0.05 + 0.15 * trial, fire)
        timer.start()
        try:
            thn.build(tensors)
            print("finished")
        except KeyboardInterrupt:
            print("KeyboardInterrupt", round(time.perf_counter() - sent["t"], 3))
        except BaseException as exc:
            print("other", type(exc).__name__, str(exc).splitlines()[0][:200])
        timer.join()
""")


def test_ctrl_c_during_build_is_a_prompt_keyboard_interrupt():
    run = subprocess.run([sys.executable, "-c", _INTERRUPT_SCRIPT], capture_output=True, text=True, timeout=240)
    lines = run.stdout.split("\n")
    lines = [ln for ln in lines if ln]
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(lines) == 6, run.stdout + run.stderr[-2000:]
    for line in lines:
        kind, *rest = line.split()
        assert kind == "KeyboardInterrupt", line
        assert float(rest[0]) < 1.0, line


_LEAK_SCRIPT = textwrap.dedent("""
    import gc, os
    from tvm import te
    import tvm_hybrid_nb as thn

    def rss_mib():
        # Memory freed to glibc's free lists is not held by anything: return it before measuring.
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def build():
        A = te.placeholder((16,), "float32", name="A")
        B = te.compute((16,), lambda i: A[i] * 2, name="B")
        thn.build([A, B])

    for _ in range(20):
        build()
    gc.collect()
    before = rss_mib()
    for _ in range(3):  # three rounds: a leak grows in each, the allocator's noise (about 1 MiB) in few
        for _ in range(100):
            build()
        gc.collect()
        after = rss_mib()
        print(after - before)
        before = after
""")


def test_dropped_modules_free_their_stages():
    run = subprocess.run([sys.executable, "-c", _LEAK_SCRIPT], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    growths = sorted(float(g) for g in run.stdout.split())
    assert len(growths) == 3 and growths[1] < 2.0, f"RSS grew {growths} MiB in three rounds of 100 builds"


def test_dropped_modules_release_the_hybrid_sources_of_their_kernels():
    import gc
    import linecache

    def use_and_drop():
        hm = thn.build(_elementwise(lambda a: a + 1.0))
        assert hm.compare().ok and hm.compare(mode="fast").ok
        assert hm.compare(stage="FlattenBuffer").ok

    use_and_drop()
    gc.collect()
    before = len(linecache.cache)
    for _ in range(3):
        use_and_drop()
    gc.collect()
    assert len(linecache.cache) == before


def test_threads_comparing_one_module_at_once_all_match_numpy():
    hm = thn.build(_elementwise(lambda a: a * 3.0 - 2.0, n=256))
    start = threading.Barrier(3)
    results, errors = [], []

    def work(k):
        try:
            x = np.linspace(-k, k, 256).astype(np.float32)
            start.wait()
            for mode in ("fast", "exact"):
                results.append(hm.compare(x, np.zeros(256, np.float32), mode=mode,
                                          reference=lambda a: a * np.float32(3) - np.float32(2)).ok)
                results.append(hm.compare(x, np.zeros(256, np.float32), mode=mode).ok)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert results == [True] * 12


# ----------------------------------------------------------------------------- misuse of compare and bisect
@pytest.mark.parametrize("kwargs, fragment", [
    ({"seed": -1}, "seed"), ({"seed": "a"}, "seed"), ({"seed": 1.5}, "seed"), ({"seed": True}, "seed"),
    ({"reference": 5}, "reference"), ({"reference": None}, "reference"),
])
def test_bad_seed_or_reference_is_one_line_before_anything_runs(kwargs, fragment):
    hm = doubled()
    with pytest.raises(CompareError) as info:
        hm.compare(**kwargs)
    assert_one_line(info, fragment)


def test_find_first_divergence_takes_stage_keys_and_refuses_foreign_stages():
    from tvm_hybrid_nb.bisect import find_first_divergence

    hm = doubled()
    flat = hm.stage("FlattenBuffer").index
    result = find_first_divergence(hm, stages=[0, "FlattenBuffer"], only_changed=False)
    assert not result.found and [s.index for s, _ in result.checked] == [0, flat]
    assert str(result) == "No divergent pass: all 2 emulated stages MATCH native."
    broken = find_first_divergence(hm, stages=[0, flat], reference=lambda a: 2 * a + (a > 0))
    assert broken.found and broken.stage.index == 0 and broken.result.outputs[0].mismatches > 0
    assert str(broken) == f"The input stage already differs from <lambda>:\n{broken.result}"
    later = find_first_divergence(hm, stages=[flat], reference=lambda a: 2 * a + (a > 0))
    assert str(later) == f"First divergent pass: {later.stage.label} ({later.stage.name})\n{later.result}"
    assert later.stage.name.endswith("FlattenBuffer") and str(later.result).startswith("MISMATCH")
    with pytest.raises(StageLookupError) as info:
        find_first_divergence(hm, stages=[doubled("int32").stages[flat]])
    assert_one_line(info, "another module")


def test_compare_takes_views_fortran_order_and_read_only_arrays_without_writing_them():
    A = te.placeholder((8, 8), "float32", name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2 + j, name="B")
    hm = thn.build([A, B])
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    truth = x * 2 + np.arange(8, dtype=np.float32)
    frozen_x, frozen_out = x.copy(), np.full((8, 8), 5, np.float32)
    frozen_x.setflags(write=False)
    frozen_out.setflags(write=False)
    strided_out = np.zeros((8, 16), np.float32)[:, ::2]
    for args in [(x.T.copy().T, np.zeros((8, 8), np.float32, order="F")), (x[::-1][::-1], strided_out),
                 (frozen_x, frozen_out)]:
        assert hm.compare(*args).ok
        assert hm.compare(*args, reference=lambda a: a * 2 + np.arange(8, dtype=np.float32)).ok
    assert not strided_out.any() and (frozen_out == 5).all()  # compare never writes what it is given
    np.testing.assert_array_equal(hm.run_native(x.T.copy().T, strided_out), truth)
    np.testing.assert_array_equal(strided_out, truth)


def _program_without_header(source: str) -> str:
    """Independent of codegen.program_text: the script's ast without its module docstring."""
    import ast

    tree = ast.parse(source)
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        tree.body = tree.body[1:]
    return ast.dump(tree)


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_stage_whose_program_repeats_a_checked_one_is_not_run_again(mode, monkeypatch):
    from tvm_hybrid_nb.bisect import find_first_divergence
    from tvm_hybrid_nb.zoo import KernelOutcome, emulate_stages

    hm = thn.build(_elementwise(lambda a: a * tvm.tirx.const(3, "float32") + a, dtype="float32"))
    last = hm.packed_api_index
    candidates = [s for s in hm.stages[:last] if s.index == 0 or s.changed]
    programs = [_program_without_header(s.kernel(mode).source) for s in candidates]
    repeats = [s.index for k, s in enumerate(candidates) if programs[k] in programs[:k]]
    assert repeats and len(repeats) < len(candidates)  # BindTarget changes only an attribute
    ran = []
    compare = hm.compare
    monkeypatch.setattr(hm, "compare", lambda *a, **kw: ran.append(kw["stage"]) or compare(*a, **kw))
    result = find_first_divergence(hm, stages=candidates, mode=mode)
    assert not result.found and [s.index for s, _ in result.checked] == [s.index for s in candidates]
    assert [s.index for s, _ in result.repeated] == repeats
    assert ran == [s.index for s in candidates if s.index not in repeats]
    assert str(result).endswith(f"({len(repeats)} of them the program of an earlier stage, not run again).")
    for stage, earlier in result.repeated:  # the comparison of the stage whose program it repeats
        assert earlier.index in ran and dict(result.checked)[stage] is dict(result.checked)[earlier]
    # A repeated program cannot hide a difference: every program that differs still runs and fails.
    wrong = find_first_divergence(hm, stages=candidates[1:], mode=mode, reference=lambda a: a * 3 + a + 1)
    assert wrong.found and wrong.stage.index == candidates[1].index

    emulated = []
    emulate = hm.emulate
    monkeypatch.setattr(hm, "emulate", lambda *a, **kw: emulated.append(kw["stage"]) or emulate(*a, **kw))
    a = np.linspace(-2, 2, 8, dtype=np.float32)
    outcome = KernelOutcome("test", "k", "ok")
    emulate_stages(hm, [a, np.zeros(8, np.float32)], [a * np.float32(3) + a], outcome, mode=mode)
    assert outcome.outcome == "ok" and outcome.stages_checked == len(candidates)
    assert outcome.stages_repeated == len(repeats)
    assert emulated == [s.index for s in candidates if s.index not in repeats]


def test_random_rows_picked_by_index_lie_within_a_symbolic_extent():
    # relax's samplers read the row sample_indices[i] of a (batch, vocab) table, batch symbolic.
    from tvm.script import tirx as T

    @T.prim_func
    def pick(a: T.handle, b: T.handle, c: T.handle):
        batch, vocab, k = T.int64(), T.int64(), T.int64()
        probs = T.match_buffer(a, (batch, vocab), "float32")
        rows = T.match_buffer(b, (k, 1), "int32")
        out = T.match_buffer(c, (k, vocab), "float32")
        for i, j in T.grid(k, vocab):
            out[i, j] = probs[rows[i, 0], j]

    hm = thn.build(pick)
    by_name = {p.name: p for p in hm.params}
    assert by_name["rows"].index_extent == "batch"
    for seed in range(4):
        probs, rows, out = hm.random_inputs(seed=seed, sizes={"batch": 3, "vocab": 4, "k": 20})
        assert 0 <= rows.min() and rows.max() < 3 and len(set(rows.ravel())) > 1
        assert hm.compare(probs, rows, out, mode="fast").ok
        hm.run_native(probs, rows, out)
        np.testing.assert_array_equal(out, probs[rows[:, 0]])


def test_random_token_ids_index_the_embedding_table_in_range():
    from tvm.script import tirx as T

    @T.prim_func
    def embed(ids: T.Buffer((2, 5), "int32"), table: T.Buffer((50, 4), "float32"),
              clamped: T.Buffer((2, 5), "int32"), out: T.Buffer((2, 5, 4), "float32"),
              out2: T.Buffer((2, 5, 4), "float32")):
        for i, j, k in T.grid(2, 5, 4):
            out[i, j, k] = table[T.Cast("int64", ids[i, j]), k]
            out2[i, j, k] = table[T.max(T.min(clamped[i, j], 49), 0), k]

    hm = thn.build(embed)
    by_name = {p.name: p for p in hm.params}
    assert by_name["ids"].index_extent == 50 and by_name["clamped"].index_extent is None
    for seed in range(4):
        ids, table, clamped, out, out2 = hm.random_inputs(seed=seed)
        assert ids.dtype == np.int32 and 0 <= ids.min() and ids.max() < 50
        assert clamped.min() < 0 or clamped.max() > 49  # plain random integers where no index is read
        assert hm.compare(ids, table, clamped, out, out2, mode="fast").ok  # native runs: nothing traps
        np.testing.assert_array_equal(hm.run_native(ids, table, clamped, out, out2)[0], table[ids])


def test_random_indices_that_wrap_negatives_lie_in_range():
    # relax's scatter_elements/gather_elements wrap a negative index (`idx + (idx < 0) * 6`) inside the
    # fused index arithmetic: random integers there write out of bounds, so they lie in [0, 4), the
    # smallest extent of the dimensions the value indexes.
    from tvm.script import tirx as T

    @T.prim_func
    def scatter(data: T.Buffer((4, 6), "float32"), idx: T.Buffer((4, 3), "int64"),
                upd: T.Buffer((4, 3), "float32"), out: T.Buffer((4, 6), "float32")):
        for i, j in T.grid(4, 6):
            out[i, j] = data[i, j]
        for i, j in T.grid(4, 3):
            out[(i * 6 + (idx[i, j] + T.Cast("int64", idx[i, j] < T.int64(0)) * T.int64(6))) // T.int64(6),
                (i * 6 + (idx[i, j] + T.Cast("int64", idx[i, j] < T.int64(0)) * T.int64(6))) % T.int64(6)] = upd[i, j]

    hm = thn.build(scatter)
    assert {p.name: p for p in hm.params}["idx"].index_extent == 4
    for seed in range(3):
        data, idx, upd, out = hm.random_inputs(seed=seed)
        assert 0 <= idx.min() and idx.max() < 4 and len(set(idx.ravel())) > 1
        assert hm.compare(data, idx, upd, out, mode="fast").ok
        want = data.copy()
        for i in range(4):
            for j in range(3):
                want[i, idx[i, j]] = upd[i, j]
        hm.run_native(data, idx, upd, out)
        np.testing.assert_array_equal(out, want)
