"""The harvester of TVM's test-suite TIR (``zoo --tvm-tests``), on a small synthetic "tests" directory
written here: never on TVM's own sources, which this project does not ship."""
from __future__ import annotations

import re
import textwrap

from tvm_hybrid_nb import cli, tvm_corpus

SYNTHETIC = textwrap.dedent('''
    import pytest
    from tvm.script import tirx as T

    N = 8


    @T.prim_func
    def add_one(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32")):
        for i in range(N):
            B[i] = A[i] + T.float32(1)


    class TestScale:
        factor = 3

        @T.prim_func(private=True, s_tir=True)
        def before(a: T.handle, b: T.handle):
            n = T.int32()
            A = T.match_buffer(a, (4, n), "int32")
            B = T.match_buffer(b, (4, n), "int32")
            for i, j in T.grid(4, n):
                with T.sblock("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * factor


    @T.prim_func(s_tir=True)
    def carried(A: T.Buffer((2,), "float32"), E: T.Buffer((2,), "float32")):
        # B carries a value from one iteration to the next; TVM's PlanAndUpdateBufferAllocationLocation
        # allocates it inside the loop (stages 5-19 are wrong; the native build is right by luck).
        with T.sblock("outer"):
            B = T.sblock_alloc_buffer((2,))
            for i in range(3):
                with T.sblock("put"):
                    T.where(i < 2)
                    B[i % 2] = A[i] * T.float32(2)
                with T.sblock("take"):
                    T.where(1 <= i)
                    E[i - 1] = B[(i + 1) % 2] + T.float32(1)


    def test_nested():
        @T.prim_func
        def extern_call(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
            for i in range(4):
                B[i] = T.call_extern("float32", "fabsf", A[i])

        @T.prim_func
        def add_one_again(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32")):
            for i in range(N):
                B[i] = A[i] + T.float32(1)

        @T.prim_func
        def newer_tvmscript(A: T.Buffer((4,), "float32")):
            T.no_such_construct(A)

        @T.prim_func
        def gpu_only(A: T.Buffer((4,), "float32")):
            for i in T.thread_binding(4, thread="threadIdx.x"):
                A[i] = T.float32(0)

        @T.prim_func
        def slow(A: T.Buffer((1,), "float32")):
            for i in range(300000000):
                A[0] = A[0] * T.float32(0.5) + T.float32(1)


    raise SystemExit("the harvester must not import this test module")
''')


def test_harvest_finds_module_class_and_nested_prim_funcs(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_synthetic.py").write_text(SYNTHETIC)
    (tmp_path / "broken.py").write_text("def (:\n")  # not Python: skipped
    items = tvm_corpus.harvest(tmp_path)
    assert [i.qualname for i in items] == [
        "add_one", "TestScale.before", "carried", "test_nested.extern_call", "test_nested.add_one_again",
        "test_nested.newer_tvmscript", "test_nested.gpu_only", "test_nested.slow"]
    assert {i.group for i in items} == {"sub"}
    assert items[1].origin == "sub/test_synthetic.py:TestScale.before"


def test_zoo_tvm_tests_checks_each_function_against_its_native_build(tmp_path, capsys):
    (tmp_path / "test_synthetic.py").write_text(SYNTHETIC)
    status = cli.main(["zoo", "--tvm-tests", str(tmp_path), "--timeout", "20"])
    out = capsys.readouterr().out
    assert status == 1, out  # the timeout fails the run
    # 8 harvested: newer_tvmscript not built by this TVM, gpu_only not built for llvm, add_one_again a
    # duplicate of add_one; of the 5 tested, add_one and TestScale.before (a class-level closure
    # variable, a symbolic size) are ok, the external C call is refused, carried is wrong at TVM's
    # fault, slow times out.
    assert "| . | 8 | 1 | 1 | 1 | 5 | 2 | 1 | 0 | 1 | 1 |" in out, out
    assert re.search(r"carried at stage 5 PlanAndUpdateBufferAllocationLocation .*TVM finding .*"
                     r"read of B\[0\], an element of a buffer allocation that was never written", out), out
    stages = int(re.search(r"emulated at (\d+) changed stages", out).group(1))
    assert stages >= 6, out
    slow_line = next(n for n, line in enumerate(SYNTHETIC.splitlines(), 1) if "def slow" in line)
    assert f"test_synthetic.py:{slow_line} test_nested.slow at stage 0 input" in out, out
    assert "tirx.call_extern: no exact numpy translation" in out, out


def test_zoo_tvm_tests_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    assert cli.main(["zoo", "--tvm-tests", str(tmp_path / "missing")]) == cli.EXIT_USAGE
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'missing'}: no such file or directory"
    (tmp_path / "test_plain.py").write_text("def test_nothing():\n    pass\n")
    assert cli.main(["zoo", "--tvm-tests", str(tmp_path)]) == cli.EXIT_USAGE
    assert "no @T.prim_func definitions under" in capsys.readouterr().err
    assert cli.main(["zoo", "--tvm-tests", str(tmp_path), "--timeout", "0"]) == cli.EXIT_USAGE


def test_a_function_that_returns_a_value_is_compared_by_its_value():
    import numpy as np
    import tvm

    from tvm_hybrid_nb import module
    from tvm_hybrid_nb.zoo import KernelOutcome, emulate_stages

    func = tvm.script.from_source(textwrap.dedent('''
        @T.prim_func
        def f(x: T.int8, y: T.int8, B: T.Buffer((4,), "int8")) -> T.int8:
            for i in range(4):
                B[i] = x + T.Cast("int8", i)
                if i == 2:
                    return x * y
            return y
    '''), extra_vars={"T": __import__("tvm.script", fromlist=["tirx"]).tirx})
    outcome = tvm_corpus.check_function(func.with_attr("global_symbol", "main"), "f")
    assert (outcome.outcome, outcome.reason) == ("ok", ""), outcome
    assert outcome.stages_checked >= 2
    hm = module.build(func)
    inputs = [100, 3, np.zeros(4, "int8")]
    expected = [np.array([100, 101, 102, 0], "int8"), np.asarray(44)]  # 300 wraps to 44 in int8
    wrong = KernelOutcome("tvm-tests", "f", "ok")
    emulate_stages(hm, inputs, expected, wrong)
    assert wrong.outcome == "ok", wrong
    emulate_stages(hm, inputs, expected[:1] + [np.asarray(300)], wrong)
    assert wrong.outcome == "wrong" and "44 vs 300" in wrong.reason, wrong


TRAPS = textwrap.dedent('''
    from tvm.script import tirx as T


    @T.prim_func
    def gather(A: T.Buffer((16,), "float32"), IA: T.Buffer((8,), "int32"), B: T.Buffer((8,), "float32")):
        # IA indexes A as it is: its seeded values lie in [0, 16) (ParamSpec.index_extent).
        for i in range(8):
            B[i] = A[IA[i]]


    @T.prim_func
    def gather_next(A: T.Buffer((16,), "float32"), IA: T.Buffer((8,), "int32"), B: T.Buffer((8,), "float32")):
        # Seeded int32 values lie in [-100, 100]: out of bounds; in [0, 4) the gather is tested.
        for i in range(8):
            B[i] = A[IA[i] + 1]


    @T.prim_func
    def overrun(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        # Reads A[8] on every input: no native reference, whatever the inputs.
        for i in range(8):
            B[i] = A[i + 1]


    @T.prim_func
    def fixed_rows(a: T.handle, B: T.Buffer((3,), "float32")):
        # Reads 3 rows of A whatever n is: n = 4 overruns B, n = 1 fits.
        n = T.int32()
        A = T.match_buffer(a, (n,), "float32")
        for i in range(n):
            B[i] = A[i]


    @T.prim_func
    def shifted(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32"), n: T.int32):
        # Only n <= 0 stays in A: tested with the scalar 0.
        for i in range(4):
            B[i] = T.Select(1 <= i, A[i + n], T.float32(0))


    @T.prim_func
    def counted(A: T.Buffer((1,), "float32"), n: T.int32):
        # Overruns A for every n >= 1; n = 0 (a loop bound) would run nothing and is not tried.
        for i in range(n):
            A[i + 1] = T.float32(1)
''')


def test_zoo_tvm_tests_retries_trapping_inputs_and_says_why_there_is_no_reference(tmp_path, capsys):
    (tmp_path / "test_traps.py").write_text(TRAPS)
    status = cli.main(["zoo", "--tvm-tests", str(tmp_path), "--timeout", "30", "-v"])
    out = capsys.readouterr().out
    assert status == 0, out
    lines = {re.search(r"test_traps\.py:\w+", line).group(0): line for line in out.splitlines()
             if "test_traps.py:" in line}
    # gather_next, fixed_rows and shifted are compared with their native build on the first other inputs that fit.
    assert lines["test_traps.py:gather"].startswith("ok ") and "other inputs" not in lines["test_traps.py:gather"], out
    assert lines["test_traps.py:gather_next"].startswith("ok "), out
    assert "on other inputs (integer arrays in [0, 4)): the seeded ones trap" in lines["test_traps.py:gather_next"], out
    assert lines["test_traps.py:fixed_rows"].startswith("ok "), out
    assert "on other inputs (sizes 1, integer arrays in [0, 2))" in lines["test_traps.py:fixed_rows"], out
    # overrun really reads outside A: the trap, first, names the access.
    assert lines["test_traps.py:overrun"].startswith("no native reference "), out
    assert ("(inputs trap: out of bounds) native run refused, the inputs trap: IndexError: out-of-bounds read "
            "of A[8] (") in lines["test_traps.py:overrun"], out
    assert lines["test_traps.py:shifted"].startswith("ok "), out
    assert "on other inputs (integer scalars 0)" in lines["test_traps.py:shifted"], out
    assert "(and on 5 other input sets)" in lines["test_traps.py:overrun"], out
    assert re.search(r"no native reference \(2\), by category:\n\s+2  inputs trap: out of bounds", out), out
    assert lines["test_traps.py:counted"].startswith("no native reference "), out
    assert "out-of-bounds write of A[1]" in lines["test_traps.py:counted"], out
    assert "| . | 6 | 0 | 2 | 0 | 4 | 4 | 0 | 0 | 0 | 0 |" in out, out


def test_the_trap_checks_run_of_stage_0_is_its_checked_run(monkeypatch):
    """A kernel that can trap (a gather by an input index) has stage 0 emulated before its native
    run; that run, on the same inputs and program, is stage 0's result: it is not run again."""
    import numpy as np
    from tvm.script import tirx as T

    from tvm_hybrid_nb import module as hmodule
    from tvm_hybrid_nb.tvm_corpus.check import check_function

    @T.prim_func
    def gather(A: T.Buffer((8,), "float32"), idx: T.Buffer((8,), "int32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            B[i] = A[idx[i]] * T.float32(2)

    runs: dict[str, int] = {}
    real_run = hmodule._run_kernel

    def counting(kernel, values, stage, progress=None):
        runs[stage.label] = runs.get(stage.label, 0) + 1
        return real_run(kernel, values, stage, progress)

    monkeypatch.setattr(hmodule, "_run_kernel", counting)
    outcome = check_function(gather, "gather")
    assert outcome.outcome == "ok", outcome.reason
    assert outcome.stages_checked > 1
    stage0 = next(label for label in runs if label.startswith("0 "))
    assert runs[stage0] == 1, runs
    assert np.all(np.array(list(runs.values())) == 1), runs  # each distinct program once


RAW_POINTER = textwrap.dedent('''
    from tvm.script import tirx as T


    def test_nested_for():
        @T.prim_func(private=True, s_tir=True)
        def func(data: T.handle("float32")):
            # TVM's HoistIfThenElse test: a raw pointer parameter, viewed by a buffer of one element
            data_ptr = T.decl_buffer(1, "float32", data=data)
            for i in range(5):
                data_ptr[i] = data_ptr[i] + T.float32(0.5)
''')


def test_a_raw_pointer_parameter_has_no_native_reference_and_is_no_crash(tmp_path, capsys):
    # Since the trap check runs stage 0 before the native run, its refusal of the parameter (no numpy
    # value for a pointer) was reported as a crash of the emulator; the native run cannot take one either.
    (tmp_path / "test_pointer.py").write_text(RAW_POINTER)
    status = cli.main(["zoo", "--tvm-tests", str(tmp_path), "-v"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "| . | 1 | 0 | 1 | 0 | 0 | 0 | 0 | 0 | 0 | 0 |" in out, out
    assert "no numpy value for a parameter" in out and not re.search(r"^crash", out, re.M), out
