"""%%hybrid_build / %hybrid_build through a real IPython InteractiveShell."""
from __future__ import annotations

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from ipywidgets.widgets.widget import _instances as widget_instances

from nb_kernels import MATMUL_CELL, MATMUL_SETUP
from tvm_hybrid_nb.module import HybridModule
from tvm_hybrid_nb.ui import Explorer

WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def shell():
    sh = InteractiveShell.instance()
    result = sh.run_cell("%load_ext tvm_hybrid_nb\n" + MATMUL_SETUP)
    assert result.success
    return sh


def run(shell, source):
    with capture_output() as cap:
        result = shell.run_cell(source)
    return result, cap


def explorers(cap) -> list:
    found = []
    for out in cap.outputs:
        view = out.data.get(WIDGET)
        if view is not None:
            found.append(widget_instances[view["model_id"]])
    return found


def click(panel, timeout: float = 60.0) -> str:
    """Click a run panel's button and wait for its worker thread to show the result."""
    panel.button.click()
    assert panel.controls.run.join(timeout)
    return panel.result.value


def assert_one_line_usage_error(result, cap, *fragments):
    assert not result.success
    err = cap.stderr.strip()
    assert err.startswith("UsageError: "), err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err and "File \"" not in cap.stdout
    for fragment in fragments:
        assert fragment in err, err


def test_cell_form_builds_the_last_expression_binds_and_shows_the_explorer(shell):
    shell.user_ns.pop("hybrid_mod", None)
    result, cap = run(shell, "%%hybrid_build\n" + MATMUL_CELL)
    assert result.success, cap.stderr
    hm = shell.user_ns["hybrid_mod"]
    assert isinstance(hm, HybridModule)
    assert [p.name for p in hm.params] == ["A", "B", "C"]
    assert "sch" in shell.user_ns  # the cell ran in the user namespace
    (ex,) = explorers(cap)
    assert isinstance(ex, Explorer) and ex.hm is hm
    assert ex.pass_list.options[0][1] == 0 and ex.pass_list.value == 0
    assert "MATCH" in click(ex.panel(0).compare)


def test_cell_form_binds_name(shell):
    result, cap = run(shell, "%%hybrid_build my_kernel --target llvm\n" + MATMUL_CELL)
    assert result.success, cap.stderr
    assert isinstance(shell.user_ns["my_kernel"], HybridModule)
    assert shell.user_ns["my_kernel"].target.kind.name == "llvm"


def test_line_form_explores_a_schedule_or_a_module(shell):
    run(shell, "%%hybrid_build explored\n" + MATMUL_CELL)
    hm = shell.user_ns["explored"]
    shell.user_ns.pop("hybrid_mod", None)
    result, cap = run(shell, "%hybrid_build explored")
    assert result.success, cap.stderr
    (ex,) = explorers(cap)
    assert ex.hm is hm and "hybrid_mod" not in shell.user_ns  # shown as it is, nothing rebound
    result, cap = run(shell, "%hybrid_build sch --no-widget")
    assert result.success, cap.stderr
    assert explorers(cap) == []
    assert "thn-pass-table" in cap.outputs[0].data["text/html"]
    assert isinstance(shell.user_ns["hybrid_mod"], HybridModule)
    assert shell.user_ns["hybrid_mod"] is not hm


def test_line_form_expression_may_contain_spaces_and_calls(shell):
    result, cap = run(shell, '%hybrid_build te.create_prim_func([A, B, C]) --target "llvm"')
    assert result.success, cap.stderr
    (ex,) = explorers(cap)
    assert [p.name for p in ex.hm.params] == ["A", "B", "C"]


def test_reference_and_inputs_options_reach_the_buttons(shell):
    shell.run_cell("""
calls = []
def matmul_ref(a, b):
    calls.append(a.copy())
    return a @ b
given_a = np.eye(16, dtype="float32") * 2
given_b = np.ones((16, 16), "float32")
""")
    result, cap = run(shell, "%%hybrid_build ref_mod --reference matmul_ref --inputs '[given_a, given_b]'\n"
                      + MATMUL_CELL)
    assert result.success, cap.stderr
    (ex,) = explorers(cap)
    shown = click(ex.panel(0).compare)
    assert "MATCH" in shown and "matmul_ref" in shown
    np.testing.assert_array_equal(shell.user_ns["calls"][-1], shell.user_ns["given_a"])


def test_cell_exception_is_one_line_and_keeps_the_old_binding(shell):
    shell.user_ns["keep_me"] = "old value"
    result, cap = run(shell, "%%hybrid_build keep_me\nx = 1\ny = undefined_name + x\nsch")
    assert_one_line_usage_error(result, cap, "NameError", "undefined_name", "cell line 3")
    assert shell.user_ns["keep_me"] == "old value"
    ok, _ = run(shell, "1 + 1")  # the shell is alive
    assert ok.success and ok.result == 2


def test_schedule_error_is_one_line_without_the_cpp_trace(shell):
    shell.user_ns["keep_me"] = "old value"
    cell = MATMUL_CELL.replace('sch.get_sblock("C")', 'sch.get_sblock("no_such_block")')
    result, cap = run(shell, "%%hybrid_build keep_me\n" + cell)
    assert_one_line_usage_error(result, cap, "the cell raised", "no_such_block", "cell line 8")
    assert "0x" not in cap.stderr and ".cc" not in cap.stderr
    assert shell.user_ns["keep_me"] == "old value"


GPU_BOUND_ON_CPU = MATMUL_CELL.replace("sch\n", "").rstrip() + """
sch.bind(sch.get_loops(sch.get_sblock("C"))[2], "threadIdx.x")
sch
"""


def test_schedule_error_shows_tvms_ir_with_markers_folded_under_the_line(shell):
    shell.user_ns["keep_me"] = "old value"
    cell = MATMUL_CELL.replace("sch\n", "").rstrip() + "\nsch.parallel(kk)\nsch\n"
    result, cap = run(shell, "%%hybrid_build keep_me\n" + cell)
    assert_one_line_usage_error(result, cap, "the cell raised ScheduleError")
    (shown,) = [o.data["text/html"] for o in cap.outputs if "text/html" in o.data]
    assert "<details" in shown and "^^^" in shown and "T.sblock(&quot;C&quot;)" in shown
    assert shown.index("<summary") < shown.index("^^^")  # the IR is inside the collapsed part
    assert shell.user_ns["keep_me"] == "old value"


VECTORIZE_SYMBOLIC = """
n = te.var("n")
X = te.placeholder((n,), "float32", name="X")
Y = te.compute((n,), lambda i: X[i] * 2.0, name="Y")
vsch = s_tir.Schedule(te.create_prim_func([X, Y]))
vsch.vectorize(vsch.get_loops(vsch.get_sblock("Y"))[0])
vsch
"""


@pytest.mark.parametrize("cell, step", [(VECTORIZE_SYMBOLIC, "tirx.VectorizeLoop"),
                                        (GPU_BOUND_ON_CPU, "code generation")])
def test_tvm_lowering_failure_binds_name_and_shows_the_failed_pass(shell, cell, step):
    shell.user_ns["keep_me"] = "old value"
    result, cap = run(shell, "%%hybrid_build keep_me\n" + cell)
    assert result.success, cap.stderr
    hm = shell.user_ns["keep_me"]
    assert isinstance(hm, HybridModule) and hm.failure is not None
    assert hm.failure.step == step and step in hm.failure.summary
    assert len(hm.stages) == hm.failure.stage_number
    (ex,) = explorers(cap)
    label, value = ex.pass_list.options[-1]
    assert label == f"✗ {hm.failure.stage_number} {step} — failed"
    assert ex.pass_list.value == value
    assert hm.failure.message in __import__("html").unescape(ex.panel(value).message.value)


def test_verbose_shows_the_whole_traceback(shell):
    result, cap = run(shell, "%%hybrid_build keep_me --verbose\nx = 1\ny = undefined_name + x\nsch")
    assert not result.success
    assert "Traceback" in cap.stdout + cap.stderr or "NameError" in cap.stdout + cap.stderr
    assert len((cap.stdout + cap.stderr).splitlines()) > 5


SMALL_CELL = """
U = te.placeholder((4, 8), "float32", name="U")
V = te.compute((4, 8), lambda i, j: U[i, j] + 1.0, name="V")
te.create_prim_func([U, V])
"""


def test_rerunning_a_cell_closes_the_previous_explorer(shell):
    import warnings

    from ipywidgets import Widget

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        counts = []
        for _ in range(20):
            result, cap = run(shell, "%%hybrid_build rerun_mod\n" + SMALL_CELL)
            assert result.success, cap.stderr
            (ex,) = explorers(cap)
            ex.panel(ex.hm.stage("FlattenBuffer").index).views.value = "Diff"  # widgets made on demand too
            counts.append(len(Widget.widgets))
    assert counts[-1] == counts[1], counts  # no growth after the first re-run


def test_unbuildable_values_and_bad_arguments_are_usage_errors(shell):
    assert shell.run_cell(MATMUL_CELL).success  # a good `sch` (other tests rebind it)
    shell.user_ns["keep_me"] = "old value"
    cases = [  # (cell, what its one-line error says)
        ("%%hybrid_build keep_me\n42", ["cannot build a int"]),
        ("%%hybrid_build keep_me\nz = 3", ["must end with an expression"]),
        ("%%hybrid_build 9lives\nsch", ["NAME must be a Python identifier"]),
        ("%%hybrid_build keep_me --reference 5\nsch", ["--reference must name a function"]),
        ("%%hybrid_build keep_me --inputs '[1, 2, 3, 4]'\nsch", ["--inputs gave 4 values"]),
        ("%%hybrid_build keep_me --inputs 'nope('\nsch", ["--inputs", "not valid Python"]),
        ("%%hybrid_build keep_me --frobnicate\nsch", ["unrecognized arguments"]),
        ("%hybrid_build", ["needs an expression"]),
        ("%hybrid_build missing_thing", ["NameError"]),
    ]
    for cell, fragments in cases:
        result, cap = run(shell, cell)
        assert_one_line_usage_error(result, cap, *fragments)
    assert shell.user_ns["keep_me"] == "old value"


def test_unsupported_construct_is_shown_not_raised_and_inputs_explain(shell):
    shell.run_cell("""
from tvm import tirx
X = te.placeholder((8,), "float32", name="X")
Y = te.compute((8,), lambda i: tirx.call_pure_extern("float32", "cosf", X[i]), name="Y")
""")
    result, cap = run(shell, "%%hybrid_build cos_mod\n[X, Y]")
    assert result.success, cap.stderr
    (ex,) = explorers(cap)
    assert ex.panel(0).compare is None
    assert "call_pure_extern" in ex.panel(0).info.value
    # The signature is known even though the body cannot be emulated: inputs are checked against it,
    # and the explorer says why there is nothing to compare.
    result, cap = run(shell, "%%hybrid_build cos_mod2 --inputs '[np.zeros(8, \"float32\")]'\n[X, Y]")
    assert result.success, cap.stderr
    (ex,) = explorers(cap)
    assert "call_pure_extern" in ex.panel(0).info.value
    result, cap = run(shell, "%%hybrid_build cos_mod3 --inputs '[np.zeros(9, \"float32\")]'\n[X, Y]")
    assert_one_line_usage_error(result, cap, "X")
    assert "cos_mod3" not in shell.user_ns


def test_help_lists_the_arguments(shell):
    doc = shell.find_cell_magic("hybrid_build").__doc__
    for option in ("--target", "--reference", "--inputs", "--no-widget", "--dump", "--verbose", "NAME"):
        assert option in doc
    assert shell.find_line_magic("hybrid_build") is not None
    assert doc.startswith("%hybrid_build [--target T]") and "::" not in doc  # no RST residue in `?`


def test_dump_writes_every_stage_and_a_rerun_replaces_it(shell, tmp_path):
    target = tmp_path / "stages"
    for _ in range(2):  # re-running the cell with --overwrite replaces the previous dump
        result, cap = run(shell, f"%%hybrid_build dumped --dump {target} --overwrite\n" + MATMUL_CELL)
        assert result.success, cap.stderr
    hm = shell.user_ns["dumped"]
    assert (target / "index.json").is_file()
    assert len(list(target.glob("*.tvmscript.py"))) == len(hm.stages)
    (target / "notes.txt").write_text("mine")
    result, cap = run(shell, f"%%hybrid_build dumped --dump {target / 'notes.txt'}\n" + MATMUL_CELL)
    assert_one_line_usage_error(result, cap, "not a directory")


def test_cuda_build_hides_tvms_cuda_version_note_and_compares_with_the_input_stage(shell, capfd):
    import tvm_hybrid_nb as thn
    from tvm_hybrid_nb.examples import gpu_row_sum

    capfd.readouterr()
    thn.build(gpu_row_sum().obj, target="cuda")  # independent truth: TVM writes the note to fd 2
    assert "Unable to detect CUDA version" in capfd.readouterr().err
    shell.user_ns["gpu_row_sum"] = gpu_row_sum
    result, cap = run(shell, "%%hybrid_build gpu_mod --target cuda\ngpu_row_sum().obj")
    assert result.success, cap.stderr
    assert "Unable to detect CUDA version" not in capfd.readouterr().err + cap.stderr + cap.stdout
    (ex,) = explorers(cap)
    assert "reference: the emulation of the input stage" in ex.children[0].value
    hm = shell.user_ns["gpu_mod"]
    last = hm.stages[hm.packed_api_index - 1]
    shown = click(ex.panel(last.index).compare)
    assert "MATCH" in shown and "vs input stage (emulated)" in shown and last.label in shown
    # Independent truth: that stage's emulation is the row sum numpy computes.
    a = np.random.default_rng(0).standard_normal((8, 64)).astype("float32")
    b = np.zeros(8, "float32")
    hm.emulate(a, b, stage=last.index)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)
