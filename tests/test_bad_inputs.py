"""Bad input: each case gives one clear message, leaves the kernel (shell, module) alive, loses nothing.

Cell-level cases go through a real IPython InteractiveShell with ``%%hybrid_build``; API-level cases
check the message, that the module still works afterwards and, against numpy or the native build,
that the result is right.  (Cases already covered elsewhere — a cell raising NameError, ``42`` as
the last expression, a missing block, argument count/shape/dtype on ``emulate``, corrupt dumps —
are not repeated here.)
"""
from __future__ import annotations

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from tvm import te

import tvm_hybrid_nb as thn
from nb_kernels import MATMUL_CELL, MATMUL_SETUP, matmul_schedule
from tvm_hybrid_nb.errors import (ArgumentTypeError, BuildError, InsufficientMemoryError, StageLookupError)
from tvm_hybrid_nb.signature import physical_memory


@pytest.fixture(scope="module")
def shell():
    sh = InteractiveShell.instance()
    assert sh.run_cell("%load_ext tvm_hybrid_nb\n" + MATMUL_SETUP).success
    return sh


def run(shell, source):
    with capture_output() as cap:
        result = shell.run_cell(source)
    return result, cap


def assert_one_clear_line(result, cap, *fragments):
    assert not result.success
    err = cap.stderr.strip()
    assert err.startswith("UsageError: "), err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err + cap.stdout
    assert ".cc:" not in err and "0x" not in err  # no C++ trace by default
    for fragment in fragments:
        assert fragment in err, err


def assert_alive(shell, name="keep_me", value="old value"):
    assert shell.user_ns[name] == value  # a failed build never rebinds NAME
    ok, _ = run(shell, "21 * 2")
    assert ok.success and ok.result == 42
    ok, cap = run(shell, "%%hybrid_build alive --no-widget\n" + MATMUL_CELL)
    assert ok.success, cap.stderr
    assert shell.user_ns["alive"].compare().ok


@pytest.fixture(scope="module")
def matmul():
    return thn.build(matmul_schedule(8, factor=3))  # 8 rows by 3: a partial last tile


def outer_product_module():
    """C[i, j] = A[i] * A[j] over a symbolic n: small inputs, an n × n output."""
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    C = te.compute((n, n), lambda i, j: A[i] * A[j], name="C")
    return thn.build([A, C])


# --------------------------------------------------------------------------- cells
def test_cell_with_a_syntax_error(shell):
    shell.user_ns["keep_me"] = "old value"
    result, cap = run(shell, "%%hybrid_build keep_me\nx = 1\nsch = (\n")
    assert_one_clear_line(result, cap, "syntax error in the cell")
    assert_alive(shell)


def test_last_expression_that_cannot_be_built(shell):
    shell.user_ns["keep_me"] = "old value"
    result, cap = run(shell, "%%hybrid_build keep_me\n" + MATMUL_CELL + "'not a schedule'\n")
    assert_one_clear_line(result, cap, "cannot build a str", "expected a tvm.s_tir.Schedule")
    assert_alive(shell)


def test_unknown_target(shell):
    shell.user_ns["keep_me"] = "old value"
    result, cap = run(shell, "%%hybrid_build keep_me --target no_such_target\n" + MATMUL_CELL)
    assert_one_clear_line(result, cap, "unknown target 'no_such_target'")
    assert_alive(shell)
    with pytest.raises(BuildError, match="unknown target 'no_such_target'"):
        thn.build(shell.user_ns["sch"], target="no_such_target")


def test_schedule_primitive_error(shell):
    shell.user_ns["keep_me"] = "old value"
    cell = MATMUL_CELL.replace("sch\n", "") + 'sch.compute_inline(sch.get_sblock("C"))\nsch\n'
    result, cap = run(shell, "%%hybrid_build keep_me\n" + cell)
    assert_one_clear_line(result, cap, "the cell raised ScheduleError")
    assert_alive(shell)


def test_inputs_of_the_wrong_dtype_or_shape(shell):
    shell.user_ns["keep_me"] = "old value"
    result, cap = run(shell, "%%hybrid_build keep_me --inputs '[np.zeros((16, 16)), np.zeros((16, 16))]'\n"
                      + MATMUL_CELL)
    assert_one_clear_line(result, cap, "parameter A: expected dtype float32, got float64")
    assert_alive(shell)
    result, cap = run(shell, "%%hybrid_build keep_me --inputs "
                             "'[np.zeros((16, 8), \"float32\"), np.zeros((16, 16), \"float32\")]'\n" + MATMUL_CELL)
    assert_one_clear_line(result, cap, "parameter A: expected shape (16, 16), got (16, 8)")
    assert_alive(shell)


def test_load_of_a_missing_dump_in_the_line_magic(shell, tmp_path):
    shell.user_ns["keep_me"] = "old value"
    shell.user_ns["thn"] = thn
    result, cap = run(shell, f"%hybrid_build thn.load({str(tmp_path / 'missing')!r})")
    assert_one_clear_line(result, cap, "missing: no such dump directory")
    assert_alive(shell)


def test_outputs_larger_than_memory_are_refused_before_allocating(shell):
    shell.user_ns["keep_me"] = "old value"
    shell.user_ns["outer_product_module"] = outer_product_module
    n = int(np.sqrt(physical_memory() / 4)) * 2  # the n × n float32 output is 4× the machine's memory
    result, cap = run(shell, f"%%hybrid_build keep_me --inputs '[np.ones({n}, \"float32\")]'\n"
                             "outer_product_module()")
    assert_one_clear_line(result, cap, "the outputs (C) would need", "nothing was allocated")
    assert_alive(shell)


def test_keyboard_interrupt_in_a_cell_during_emulation(shell):
    shell.user_ns["keep_me"] = "old value"
    shell.run_cell("def interrupt(fraction):\n    raise KeyboardInterrupt\n")
    cell = (MATMUL_CELL.replace("sch\n", "") + "hm = thn.build(sch)\n"
            "hm.emulate(*hm.random_inputs(), progress=interrupt)\nsch\n")
    result, cap = run(shell, "%%hybrid_build keep_me\n" + cell)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert_alive(shell)
    hm = shell.user_ns["hm"]  # the module the interrupted emulation ran on still works
    assert hm.compare().ok and hm.compare(mode="fast").ok


# --------------------------------------------------------------------------- API
def test_non_contiguous_and_fortran_arrays_in_compare_and_native(matmul):
    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.random((8, 8), dtype=np.float32))
    b = rng.random((8, 16), dtype=np.float32)[:, ::2]  # strided view
    c = np.zeros((8, 16), np.float32)[:, 1::2]
    truth = a.astype(np.float64) @ b
    assert matmul.compare(a, b, c).ok and matmul.compare(a, b, c, mode="fast").ok
    np.testing.assert_allclose(matmul.run_native(a, b, c), truth, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c, truth, rtol=1e-5, atol=1e-5)  # written back into the view
    c2 = np.asfortranarray(np.zeros((8, 8), np.float32))
    np.testing.assert_allclose(matmul.emulate(a, b, c2, stage="FlattenBuffer"), truth, rtol=1e-5, atol=1e-5)


def test_read_only_output_and_read_only_inputs(matmul):
    a, b, c = matmul.random_inputs(seed=1)
    for arr in (a, b):
        arr.flags.writeable = False
    ro = np.zeros((8, 8), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ArgumentTypeError, match="parameter C: output array is read-only"):
        matmul.run_native(a, b, ro)
    assert not ro.any()
    out = matmul.run_native(a, b, c)  # read-only inputs are fine
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_stage_out_of_range_or_unknown_pass_in_compare(matmul):
    n = len(matmul.stages)
    with pytest.raises(StageLookupError, match=f"stage {n + 5} is out of range: this module has stages 0..{n - 1}"):
        matmul.compare(stage=n + 5)
    with pytest.raises(StageLookupError, match="no stage named 'tirx.NoSuchPass'; passes are: .*FlattenBuffer"):
        matmul.compare(stage="tirx.NoSuchPass")
    assert matmul.compare(stage=-1 - (n - matmul.packed_api_index)).ok  # the last emulatable stage


def test_nan_and_inf_inputs_in_compare(matmul):
    a, b, c = matmul.random_inputs(seed=2)
    a[0, 0], a[1, 1], a[2, 2] = np.nan, np.inf, -np.inf
    result = matmul.compare(a, b, c)
    assert result.ok and str(result).startswith("MATCH")
    expected = matmul.run_native(a, b, c.copy())
    assert np.isnan(expected).any() and np.isinf(expected).any()  # non-finite outputs really compared

    def same_but_one(x, y):
        out = expected.copy()
        out[0, 0] = 1.0  # a number where the kernel gives NaN
        return out

    bad = matmul.compare(a, b, c, reference=same_but_one)
    assert not bad.ok and str(bad).startswith("MISMATCH")
    assert bad.outputs[0].mismatches == 1 and bad.outputs[0].first_mismatch == (0, 0)

    def sign_flip(x, y):
        out = expected.copy()
        out[np.isinf(out)] *= -1  # +inf where the kernel gives -inf
        return out

    assert not matmul.compare(a, b, c, reference=sign_flip).ok


def test_sizes_larger_than_memory_are_refused_before_allocating():
    hm = outer_product_module()
    with pytest.raises(InsufficientMemoryError, match="would need .* GiB but this machine has"):
        hm.random_inputs(sizes={"n": 10**12})
    with pytest.raises(MemoryError, match="nothing was allocated"):  # a MemoryError too
        hm.compare(sizes={"n": 10**12})
    a, c = hm.random_inputs(seed=0, sizes={"n": 5})
    np.testing.assert_array_equal(hm.emulate(a, c), np.outer(a, a))  # still usable


def test_intermediate_buffer_larger_than_memory_is_refused_in_the_emulation():
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    T = te.compute((n, n), lambda i, j: A[i] - A[j], name="T")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n,), lambda i: te.sum(T[i, k], axis=k), name="C")
    hm = thn.build([A, C])
    big = int(np.sqrt(physical_memory() / 4)) * 2
    a = np.ones(big, np.float32)  # the inputs fit; the n × n intermediate does not
    with pytest.raises(InsufficientMemoryError, match=r"stage 0 input refused: buffer of shape .*nothing was allocated"):
        hm.emulate(a, np.zeros(big, np.float32))
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_allclose(hm.emulate(x, np.zeros(6, np.float32)), 6 * x - x.sum())


def test_keyboard_interrupt_during_emulation_propagates_and_the_module_stays_usable(matmul):
    args = matmul.random_inputs(seed=4)
    calls = []

    def interrupt(fraction):
        calls.append(fraction)
        raise KeyboardInterrupt

    for mode in ("exact", "fast"):
        with pytest.raises(KeyboardInterrupt):
            matmul.emulate(*[x.copy() for x in args], mode=mode, progress=interrupt)
    assert calls
    seen = []
    out = matmul.emulate(*[x.copy() for x in args], progress=seen.append)  # next emulation works
    np.testing.assert_allclose(out, args[0].astype(np.float64) @ args[1], rtol=1e-5, atol=1e-5)
    assert seen and seen[-1] == pytest.approx(1.0)
    assert matmul.compare(*args).ok
