"""Core: every stage before MakePackedAPI of every example kernel emulates like the native build."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tvm
from tvm import te

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import (ArgumentCountError, ArgumentShapeError, ArgumentTypeError, BuildError,
                                  StageLookupError, StageNotEmulatableError)
from tvm_hybrid_nb.examples import EXAMPLES, get_example

_BUILT: dict = {}


def built(name):
    """Build each example once per test session."""
    if name not in _BUILT:
        example = get_example(name)
        _BUILT[name] = (example, thn.build(example.obj))
    return _BUILT[name]


def pre_packed_stages(hm):
    return hm.stages[:hm.packed_api_index]


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_every_stage_before_packed_api_matches_native(name):
    example, hm = built(name)
    args = example.inputs(hm, seed=1)
    stages = pre_packed_stages(hm)
    assert len(stages) >= 40  # the llvm pipeline runs ~48 passes before MakePackedAPI
    verified: set[str] = set()
    for stage in stages:
        assert stage.emulatable, f"{stage.label}: {stage.reason}"
        if stage.source in verified:  # the same program as a stage already compared
            continue
        result = hm.compare(*args, stage=stage.index)
        assert result.ok, str(result)
        for out in result.outputs:
            if not np.issubdtype(np.dtype(out.dtype), np.floating):
                assert out.max_abs_error == 0
        verified.add(stage.source)
    assert len(verified) >= 3  # several passes changed the program


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_stage0_matches_numpy_reference(name):
    example, hm = built(name)
    args = example.inputs(hm, seed=2)
    result = hm.compare(*args, reference=example.reference)
    assert result.ok, str(result)


def test_emulation_writes_outputs_in_place_and_returns_them():
    example, hm = built("matmul_parallel_vectorize")
    a, b, c = example.inputs(hm, seed=3)
    returned = hm(a, b, c)
    assert returned is c
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert c.dtype == np.float32


def test_float32_stays_float32_in_bound_scalars():
    # float32 accumulation differs from float64 accumulation for these values: the emulation must
    # match the native float32 kernel bit for bit at stage 0 (same order of operations).
    example, hm = built("matmul_split_reorder")
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((64, 64)) * 1e3).astype(np.float32)
    b = (rng.standard_normal((64, 64)) * 1e-3).astype(np.float32)
    emu = hm.emulate(a, b, np.zeros((64, 64), np.float32)).copy()
    nat = hm.run_native(a, b, np.zeros((64, 64), np.float32))
    assert np.array_equal(emu, nat)
    f64 = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert not np.array_equal(emu, f64)


def test_distinct_tensors_sharing_a_name_get_distinct_names():
    _, hm = built("two_tensors_named_a")
    src = hm.get_source(0)
    assert "def main(A, A_1, C):" in src
    assert "A_1: T.Buffer" in hm.stages[0].script
    a, a1 = np.arange(16, dtype=np.float32), np.full(16, 3, np.float32)
    out = hm(a, a1, np.zeros(16, np.float32))
    np.testing.assert_array_equal(out, a - 2 * a1)


def test_loop_kinds_stay_visible():
    _, hm = built("matmul_parallel_vectorize")
    src = hm.get_source(0)
    assert "in parallel(8):" in src
    assert "in vectorized(8):" in src
    assert "in unrolled(8):" in src


def test_names_never_shadow_keywords_or_builtins():
    x = te.placeholder((4,), "float32", name="lambda")
    y = te.placeholder((4,), "float32", name="sum")
    z = te.compute((4,), lambda i: x[i] + y[i], name="range")
    hm = thn.build([x, y, z])
    src = hm.get_source(0)
    compile(src, "<test>", "exec")
    assert "def main(lambda_1, sum_1, range_1):" in src
    out = hm(np.ones(4, np.float32), np.full(4, 2, np.float32), np.zeros(4, np.float32))
    np.testing.assert_array_equal(out, np.full(4, 3, np.float32))


def test_stage0_source_runs_where_tvm_cannot_be_imported(tmp_path):
    example, hm = built("conv2d_padded")
    args = example.inputs(hm, seed=4)
    (tmp_path / "kernel.py").write_text(hm.get_source(0))
    np.savez(tmp_path / "inputs.npz", *args)
    runner = textwrap.dedent("""
        import sys
        sys.modules["tvm"] = None          # any `import tvm` now raises ImportError
        sys.modules["tvm_hybrid_nb"] = None
        import numpy as np
        import kernel
        data = np.load("inputs.npz")
        args = [data[f"arr_{i}"] for i in range(len(data.files))]
        kernel.main(*args)
        np.save("out.npy", args[-1])
    """)
    (tmp_path / "run.py").write_text(runner)
    proc = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    native = hm.run_native(*[a.copy() for a in args])
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), native, rtol=1e-5, atol=1e-5)
    assert "import tvm" not in hm.get_source(0)


def test_hybrid_op_with_fresh_placeholders_builds_and_matches():
    example, hm = built("matmul_parallel_vectorize")
    a = te.placeholder((64, 64), "float32", name="x")
    b = te.placeholder((64, 64), "float32", name="y")
    c = hm(a, b)
    assert isinstance(c, te.Tensor)
    d = te.compute((64, 64), lambda i, j: c[i, j] * 2.0 + 1.0, name="D")
    lib = tvm.tirx.build(te.create_prim_func([a, b, d]), target="llvm")
    rng = np.random.default_rng(5)
    xa, xb = rng.random((64, 64), dtype=np.float32), rng.random((64, 64), dtype=np.float32)
    out = tvm.runtime.tensor(np.zeros((64, 64), np.float32))
    lib["main"](tvm.runtime.tensor(xa), tvm.runtime.tensor(xb), out)
    np.testing.assert_allclose(out.numpy(), (xa.astype(np.float64) @ xb) * 2 + 1, rtol=1e-5, atol=1e-4)


def _build_and_run(inputs, output, arrays, out_shape):
    lib = tvm.tirx.build(te.create_prim_func([*inputs, output]), target="llvm")
    out = tvm.runtime.tensor(np.zeros(out_shape, np.float32))
    lib["main"](*[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


def test_symbolic_kernels_become_ops_on_concrete_and_symbolic_tensors():
    # A kernel over symbolic sizes used on a (7, 6) tensor must take n = 5, m = 4 from it (also when
    # n only appears as n + 2): before, its output kept the free size n and the graph did not build.
    example, hm = built("symbolic_window")
    x = te.placeholder((7, 6), "float32", name="x")
    c = hm(x)
    assert [int(d) for d in c.shape] == [5, 4]
    d = te.compute((5, 4), lambda i, j: c[i, j] + 1.0, name="D")
    xa = np.random.default_rng(6).random((7, 6), dtype=np.float32)
    np.testing.assert_array_equal(_build_and_run([x], d, [xa], (5, 4)), example.reference(xa) + np.float32(1))
    with pytest.raises(ArgumentShapeError, match="parameter A: dimension 0 is 1, expected n"):
        hm(te.placeholder((1, 6), "float32"))  # n would be -1
    example, hm = built("symbolic_length")
    k = te.var("k")
    y = te.placeholder((k,), "float32", name="y")
    e = hm(y)
    f = te.compute(e.shape, lambda i: e[i] - 1.0, name="F")
    ya = np.arange(9, dtype=np.float32)
    np.testing.assert_array_equal(_build_and_run([y], f, [ya], (9,)), example.reference(ya) - np.float32(1))


def test_hybrid_op_rejects_mismatched_tensors():
    _, hm = built("matmul_parallel_vectorize")
    with pytest.raises(ArgumentShapeError, match="parameter A"):
        hm(te.placeholder((32, 64), "float32"), te.placeholder((64, 64), "float32"))
    with pytest.raises(ArgumentTypeError, match="parameter B"):
        hm(te.placeholder((64, 64), "float32"), te.placeholder((64, 64), "float16"))
    with pytest.raises(ArgumentCountError, match="expected 2 input tensors"):
        hm(te.placeholder((64, 64), "float32"))


def test_symbolic_sizes_bind_from_arrays():
    _, hm = built("symbolic_length")
    for n in (1, 5, 37):
        a = np.arange(n, dtype=np.float32)
        out = hm(a, np.zeros(n, np.float32))
        np.testing.assert_array_equal(out, a * 2 + 1)
        assert np.array_equal(hm.run_native(a, np.zeros(n, np.float32)), out)


def test_argument_errors_name_the_parameter():
    _, hm = built("matmul_split_reorder")
    a = np.zeros((64, 64), np.float32)
    with pytest.raises(ValueError, match=r"expected 3 arguments \(A, B, C\), got 2"):
        hm(a, a)
    with pytest.raises(TypeError, match="parameter B: expected dtype float32, got float64"):
        hm(a, a.astype(np.float64), a)
    with pytest.raises(ValueError, match="parameter C: expected shape"):
        hm(a, a, np.zeros((64, 32), np.float32))
    with pytest.raises(TypeError, match="parameter A: expected a numpy array"):
        hm([[0.0]], a, a)
    ro = np.zeros((64, 64), np.float32)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="parameter C: output array is read-only"):
        hm(a, a, ro)


def test_non_contiguous_and_fortran_arrays_work():
    example, hm = built("matmul_split_reorder")
    rng = np.random.default_rng(6)
    big = rng.random((128, 64), dtype=np.float32)
    a = big[::2]                       # non-contiguous view
    b = np.asfortranarray(rng.random((64, 64), dtype=np.float32))
    c = np.asfortranarray(np.zeros((64, 64), np.float32))
    hm(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    c_view = np.zeros((64, 128), np.float32)[:, ::2]
    hm(a, b, c_view)
    np.testing.assert_allclose(c_view, c)


def test_stage_lookup_by_index_and_name():
    _, hm = built("matmul_split_reorder")
    assert hm.stage("tirx.FlattenBuffer").name == "tirx.FlattenBuffer"
    assert hm.stage("FlattenBuffer") is hm.stage("tirx.FlattenBuffer")
    assert hm.stage(-1) is hm.stages[-1]
    with pytest.raises(StageLookupError, match="out of range"):
        hm.stage(len(hm.stages))
    with pytest.raises(StageLookupError, match="no stage named 'NoSuchPass'"):
        hm.emulate(stage="NoSuchPass")


def test_stages_after_make_packed_api_say_why_they_cannot_run():
    _, hm = built("matmul_split_reorder")
    packed = hm.stage("tirx.MakePackedAPI")
    assert not packed.emulatable
    assert "packed-API" in packed.reason
    with pytest.raises(StageNotEmulatableError, match="MakePackedAPI"):
        hm.get_source(packed.index)


def test_capture_is_immune_to_passes_that_mutate_in_place():
    _, hm = built("matmul_split_reorder")
    annotate = hm.stage("tirx.AnnotateEntryFunc")
    before = hm.stages[annotate.index - 1]
    assert "tirx.is_entry_func" in annotate.function.attrs
    assert "tirx.is_entry_func" not in before.function.attrs
    assert annotate.changed


def test_stage_records_have_names_times_and_changes():
    _, hm = built("matmul_parallel_vectorize")
    assert hm.stages[0].name == "input"
    assert [s.index for s in hm.stages] == list(range(len(hm.stages)))
    changed = [s.short_name for s in hm.stages[1:hm.packed_api_index] if s.changed]
    assert {"FlattenBuffer", "VectorizeLoop", "UnrollLoop", "LowerOpaqueBlock"} <= set(changed)
    first_remove_no_op = next(s for s in hm.stages if s.name == "tirx.RemoveNoOp")  # it runs twice
    assert not first_remove_no_op.changed
    assert all(s.seconds >= 0 for s in hm.stages)
    assert "T.Buffer" in hm.stage("tirx.FlattenBuffer").script


def test_a_stage_that_only_adds_function_attributes_shares_the_earlier_script_under_its_own_label():
    from tvm_hybrid_nb.codegen import program_text

    _, hm = built("matmul_parallel_vectorize")
    first, bind, flatten = hm.stage(0), hm.stage("BindTarget"), hm.stage("tirx.FlattenBuffer")
    assert bind.changed and "target" in bind.function.attrs and "target" not in first.function.attrs
    for mode in ("exact", "fast"):
        sources = [s.kernel(mode).source for s in (first, bind, flatten)]
        assert f" at stage {bind.label}." in sources[1] and f" at stage {first.label}." not in sources[1]
        assert program_text(sources[1]) == program_text(sources[0])
        assert program_text(sources[2]) != program_text(sources[0])  # a pass that changes the body
    a, b = hm.random_inputs(seed=3)[:2]
    expected = hm.run_native(a, b, np.zeros((a.shape[0], b.shape[1]), "float32"))
    out = hm.emulate(a, b, np.zeros_like(expected), stage=bind.index, mode="fast")
    np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_compare_reports_mismatch_with_first_index():
    example, hm = built("matmul_split_reorder")
    args = example.inputs(hm, seed=7)

    def wrong(a, b):
        out = a.astype(np.float64) @ b
        out[3, 5] += 1.0
        return out.astype(np.float32)

    result = hm.compare(*args, reference=wrong)
    assert not result.ok
    (out,) = result.outputs
    assert out.mismatches == 1 and out.first_mismatch == (3, 5)
    assert out.max_abs_error == pytest.approx(1.0, rel=1e-3)
    assert str(result).startswith("MISMATCH")
    loose = hm.compare(*args, reference=wrong, atol=2.0)
    assert loose.ok and str(loose).startswith("MATCH")


def test_integer_compare_is_exact():
    example, hm = built("matmul_int8")
    args = example.inputs(hm, seed=8)

    def off_by_one(a, b):
        out = a.astype(np.int32) @ b.astype(np.int32)
        out[0, 0] += 1
        return out

    result = hm.compare(*args, reference=off_by_one)
    assert not result.ok and result.outputs[0].mismatches == 1


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_fast_mode_is_bit_identical_to_exact_at_every_stage(name):
    example, hm = built(name)
    args = example.inputs(hm, seed=9)
    outputs = [i for i, p in enumerate(hm.params) if p.is_output]
    vectorised = 0
    for stage in pre_packed_stages(hm):
        exact = [a.copy() for a in args]
        fast = [a.copy() for a in args]
        hm.emulate(*exact, stage=stage.index)
        hm.emulate(*fast, stage=stage.index, mode="fast")
        for i in outputs:
            assert np.array_equal(exact[i], fast[i], equal_nan=True), stage.label
        vectorised += "loops (none)" not in stage.fast_source()
    assert vectorised > 0  # fast mode really ran some loop as array operations


def test_fast_mode_keeps_a_loop_carried_dependence_serial():
    from tvm.script import tirx as T

    @T.prim_func
    def prefix_sum(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        for i in range(16):
            B[i] = A[i]
        for i in range(1, 16):
            B[i] = B[i - 1] + A[i]

    hm = thn.build(prefix_sum)
    fast_src = hm.stage(0).fast_source()
    # The first loop is independent and runs as an array; the second carries B[i - 1] and stays a loop.
    assert "Fast mode: loops i run as numpy array operations" in fast_src
    assert "for i_1 in range(1, 16):" in fast_src
    a = np.random.default_rng(0).random(16, dtype=np.float32)
    out = hm.emulate(a, np.zeros(16, np.float32), mode="fast").copy()
    np.testing.assert_array_equal(out, np.cumsum(a, dtype=np.float32))
    np.testing.assert_array_equal(out, hm.emulate(a, np.zeros(16, np.float32)))


def test_shapes_given_by_expressions_are_checked_against_the_plain_sizes():
    example, hm = built("symbolic_window")
    assert [p.describe() for p in hm.params] == ["A: float32[n + 2, m + 2]", "C: float32[n, m]"]
    a = np.random.default_rng(0).random((7, 6), dtype=np.float32)
    np.testing.assert_array_equal(hm(a, np.zeros((5, 4), np.float32)), example.reference(a))
    with pytest.raises(ValueError, match=r"parameter A: dimension 0 must be n \+ 2 = 6 \(n=4\), got 7"):
        hm(a, np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="symbolic size n: give sizes"):
        hm.random_inputs()
    a, c = hm.random_inputs(sizes={"n": 3, "m": 8})
    assert a.shape == (5, 10) and c.shape == (3, 8)


def test_build_lowers_under_the_callers_pass_context():
    """``with PassContext(config=..., disabled_pass=...)`` around thn.build lowers as tvm.build would
    there (TVM's current context is per thread, and the capture runs the build on a worker thread)."""
    ex = get_example("matmul_parallel_vectorize")

    def has_ramp(hm):
        last = hm.stage("tirx.VectorizeLoop")
        return "T.Ramp" in last.script

    assert has_ramp(thn.build(ex.obj))
    with tvm.transform.PassContext(config={"tirx.disable_vectorize": True}):
        hm = thn.build(ex.obj)
    assert not has_ramp(hm)
    args = hm.random_inputs(seed=3)
    assert hm.compare(*args, stage="tirx.VectorizeLoop").ok
    outputs = hm.emulate(*[a.copy() for a in args], stage="tirx.VectorizeLoop", mode="fast")
    expected = ex.reference(*[a for a, p in zip(args, hm.params) if not p.is_output])
    np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-5)


def test_a_symbolic_kernel_with_topis_buffer_alignment_becomes_an_op():
    # topi's extern kernels (sorts, scans) declare their buffers aligned to 8 at offset 0: the
    # specialised buffers must keep that, or PrimFunc.specialize refuses ("data_alignment 64 vs. 8").
    from tvm.script import tirx as T

    @T.prim_func
    def twice(a: T.handle, b: T.handle):
        T.func_attr({"global_symbol": "main"})
        n = T.int64()
        A = T.match_buffer(a, (n,), "float32", align=8, offset_factor=1)
        B = T.match_buffer(b, (n,), "float32", align=8, offset_factor=1)
        for i in range(n):
            B[i] = A[i] * T.float32(2)

    hm = thn.build(twice)
    x = te.placeholder((5,), "float32", name="x")
    d = te.compute((5,), lambda i: hm(x)[i] + 1.0, name="D")
    xa = np.random.default_rng(7).random(5, dtype=np.float32)
    np.testing.assert_array_equal(_build_and_run([x], d, [xa], (5,)), xa * 2 + 1)


def test_a_kernel_that_sorts_through_the_runtime_is_no_op_and_says_why():
    from tvm.relax.frontend.nn import op, spec

    from tests.test_zoo import _nn_kernels

    (sort,) = [k for k in _nn_kernels("srt", lambda self, x: op.sort(x, axis=1), {"x": spec.Tensor(("n", 6), "float32")})
               if k.llvm is not None]
    with pytest.raises(BuildError, match="touches its buffers only through a packed call"):
        thn.build(sort.llvm)(te.placeholder((3, 6), "float32", name="x"))
