"""The explorer widgets, without a browser: build them, click buttons, read .value/.children/.titles."""
from __future__ import annotations

import html
import re
import signal
import time

import numpy as np
import pytest

import ipywidgets as widgets

import tvm_hybrid_nb as thn
from nb_kernels import BROKEN_PASS, blur_reference, blur_schedule, build_broken_blur, matmul_schedule
from tvm_hybrid_nb import ui
from tvm_hybrid_nb.errors import BuildError, EmulationError


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def click(panel, timeout: float = 60.0) -> str:
    """Click a run panel's button, wait for the worker thread to show its result, return the text."""
    panel.button.click()
    assert panel.controls.run is not None and panel.controls.run.join(timeout), "the run did not finish"
    return text_of(panel.result.value)


def vectorize_symbolic():
    """sch.vectorize over a symbolic extent: tirx.VectorizeLoop fails on a CPU target."""
    from tvm import s_tir, te

    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.vectorize(i)
    return sch


@pytest.fixture(scope="module")
def matmul():
    return thn.build(matmul_schedule())


@pytest.fixture(scope="module")
def broken():
    return build_broken_blur()


def changed_indices(hm) -> list[int]:
    """Independent truth: stages whose printed TVMScript differs from the one before."""
    return [s.index for s in hm.stages[1:] if hm.stages[s.index - 1].mod.script() != s.mod.script()]


def test_pass_list_has_every_stage_with_number_full_name_time_and_badges(matmul):
    ex = ui.explorer(matmul)
    labels = [label for label, _ in ex.pass_list.options]
    assert [v for _, v in ex.pass_list.options] == [s.index for s in matmul.stages]
    changed = set(changed_indices(matmul))
    assert 5 <= len(changed) <= 15
    for stage, label in zip(matmul.stages, labels):
        assert label.split()[:2] == [str(stage.number), stage.name]  # full namespaced name
        assert ("changed" in label) == (stage.index in changed)
        assert "ms" in label
    packed = matmul.packed_api_index
    assert all("not emulatable" in labels[i] for i in range(packed, len(labels)))
    assert not any("not emulatable" in labels[i] for i in range(packed) if matmul.stages[i].emulatable)
    css = ex._style.value  # unchanged entries greyed, times as bars
    unchanged = next(s for s in matmul.stages[1:] if s.index not in changed)
    assert f"option:nth-child({unchanged.index + 1}) {{color:" in css
    assert "linear-gradient" in css
    assert "printed TVMScript" in text_of(ex.children[0].value)  # what "changed" means is said
    assert ex.pass_list.value == 0


def test_filter_narrows_the_list_and_changed_only_keeps_the_selection(matmul):
    ex = ui.explorer(matmul)
    assert ex.filter.placeholder == "filter passes"
    ex.filter.value = "simplify"
    names = [matmul.stages[v].name for _, v in ex.pass_list.options]
    assert names and all("simplify" in n.lower() for n in names)
    assert {"s_tir.StmtSimplify", "tirx.StmtSimplify"} <= set(names)  # both namespaces, told apart
    ex.filter.value = ""
    flat = matmul.stage("FlattenBuffer")
    ex.pass_list.value = flat.index
    ex.changed_only.value = True
    assert ex.pass_list.value == flat.index
    assert [v for _, v in ex.pass_list.options] == [0] + changed_indices(matmul)
    unchanged = next(s for s in matmul.stages[1:] if not s.changed)
    ex.changed_only.value = False
    ex.pass_list.value = unchanged.index
    ex.changed_only.value = True  # the selected pass stays listed and selected
    assert ex.pass_list.value == unchanged.index
    assert unchanged.index in [v for _, v in ex.pass_list.options]


def test_selecting_a_pass_shows_its_panel_and_builds_panels_on_demand():
    fresh = thn.build(matmul_schedule())
    ex = ui.explorer(fresh)
    assert len(ex._panels) == 1  # only the selected one
    flat = fresh.stage("FlattenBuffer")
    ex.pass_list.value = flat.index
    (panel,) = ex.detail.children
    assert panel is ex._panels[flat.index]
    assert "Pass tirx.FlattenBuffer" in text_of(panel.info.value)


def test_hybrid_view_starts_at_the_kernel_with_helpers_folded(matmul):
    ex = ui.explorer(matmul)
    vec = matmul.stage("VectorizeLoop")
    panel = ex.panel(vec.index)
    assert panel.views.options == ("Hybrid Python", "TVMScript", "Diff")
    assert panel.views.value == "Hybrid Python"
    shown = panel.content.value
    # Fast mode's plan comes first (folded), then the source.
    assert shown.startswith('<details class="thn-plan">') and "fast mode:" in shown
    shown = shown[shown.index("</details>") + len("</details>"):]
    kernel_part, helpers_part = shown.split('<details class="thn-helpers">')
    kernel_lines = [ln for ln in text_of(kernel_part).splitlines() if ln.strip()]
    assert any("def main(" in ln for ln in kernel_lines[:10])
    source = vec.source
    start = source.splitlines().index(next(ln for ln in source.splitlines() if ln.startswith("def main(")))
    helper_count = sum(1 for ln in source.splitlines() if ln.strip()) - sum(
        1 for ln in source.splitlines()[start:] if ln.strip() and (ln.startswith(" ") or ln.startswith("def main(")))
    assert f"helpers ({helper_count} lines)" in helpers_part
    # Every line of the source is shown, with its number in the file (errors name these numbers).
    numbered = text_of(shown)
    assert re.search(rf"^\s*{start + 1}\s*def main\(", numbered, re.M)
    for line in source.splitlines():
        if line.strip():
            assert line.strip() in numbered
    # get_source() stays one complete runnable file.
    ns: dict = {}
    exec(compile(matmul.get_source(vec.index), "<vec>", "exec"), ns)
    a, b, c = matmul.random_inputs(seed=3)
    ns["main"](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    panel.views.value = "TVMScript"
    assert text_of(panel.content.value).strip() == vec.script.strip()


def test_diff_is_side_by_side_between_any_two_stages(matmul):
    ex = ui.explorer(matmul)
    flat = matmul.stage("FlattenBuffer")
    prev = matmul.stages[flat.index - 1]
    panel = ex.panel(flat.index)
    panel.views.value = "Diff"
    diff = panel.diff
    assert (diff.source.value, diff.target.value) == (prev.index, flat.index)
    shown = diff.content.value
    assert "<table" in shown and 'class="diff_add"' in shown or 'class="diff_chg"' in shown  # intra-line
    new_lines = set(flat.script.splitlines()) - set(prev.script.splitlines())
    text = text_of(shown).replace("\xa0", " ")
    for line in list(new_lines)[:5]:
        assert line.strip() in text
    # Any two stages: the input against the last emulatable stage.
    last = matmul.stages[matmul.packed_api_index - 1]
    diff.source.value = 0
    diff.target.value = last.index
    text = text_of(diff.content.value).replace("\xa0", " ")
    assert f"{matmul.stages[0].label} (TVMScript)" in text and f"{last.label} (TVMScript)" in text
    assert "T.func_attr" in text
    diff.hide.value = True
    assert "T.func_attr" not in text_of(diff.content.value).replace("\xa0", " ")
    diff.source.value = diff.target.value = flat.index
    assert "No change" in text_of(diff.content.value)


def test_emulate_and_compare_matches_native(matmul):
    ex = ui.explorer(matmul)
    source = ex.panel(0)
    assert source.compare.button.description == "Emulate & compare"
    shown = click(source.compare)
    assert shown.startswith("MATCH") and "vs native" in shown
    assert "0/256 mismatches" in shown and "emulation" in shown and "reference" in shown
    assert source.compare.heatmaps.children == ()
    assert "MATCH" in ex.pass_list.options[0][0]  # the list shows the last result
    a, b, c = matmul.random_inputs(seed=0)
    matmul.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_wrong_reference_gives_mismatch_an_error_heat_map_and_the_worst_element(matmul):
    def off_in_row_3(a, b):
        out = a @ b
        out[3] += np.arange(16, dtype="float32")
        out[3, 0] += 0.5
        return out

    ex = ui.explorer(matmul, reference=off_in_row_3)
    panel = ex.panel(0).compare
    shown = click(panel)
    assert shown.startswith("MISMATCH") and "vs off_in_row_3" in shown
    assert "16/256 mismatches" in shown and "first at (3, 0)" in shown
    a, b, c = matmul.random_inputs(seed=0)
    expected = (a @ b)[3, 15]
    assert "worst at (3, 15)" in shown
    assert f"reference {float(np.float32(expected + 15))!r}" in shown or "reference " in shown
    (image,) = panel.heatmaps.children
    assert isinstance(image, widgets.Image) and image.value[:4] == b"\x89PNG"
    assert "MISMATCH" in ex.pass_list.options[0][0]


def test_every_emulatable_changed_pass_compares_that_stage(matmul):
    ex = ui.explorer(matmul)
    for index in changed_indices(matmul):
        stage = matmul.stages[index]
        panel = ex.panel(index)
        if stage.emulatable:
            shown = click(panel.compare)
            assert shown.startswith("MATCH") and f"stage {stage.label}" in shown
        else:
            assert panel.compare is None
            assert "Cannot be emulated" in text_of(panel.info.value)


def test_given_inputs_are_the_ones_compared(matmul):
    a = np.eye(16, dtype="float32")
    b = np.arange(256, dtype="float32").reshape(16, 16)
    seen = []

    def reference(x, y):
        seen.append((x.copy(), y.copy()))
        return x @ y

    ex = ui.explorer(matmul, reference=reference, inputs=[a, b, np.zeros((16, 16), "float32")])
    assert click(ex.panel(0).compare).startswith("MATCH")
    np.testing.assert_array_equal(seen[0][0], a)
    np.testing.assert_array_equal(seen[0][1], b)


def test_button_errors_are_one_line_and_do_not_raise(matmul):
    def reference(a, b):
        raise RuntimeError("reference exploded\nsecond line")

    ex = ui.explorer(matmul, reference=reference)
    shown = click(ex.panel(0).compare)
    assert "RuntimeError: reference exploded" in shown and "second line" not in shown
    assert "RuntimeError: reference exploded" in click(ex.divergence)
    wrong_count = ui.explorer(matmul, inputs=[np.zeros((16, 16), "float32")])
    assert "expected 3 arguments" in click(wrong_count.panel(0).compare)


def test_run_button_is_disabled_while_running_and_cancel_stops_a_real_emulation(matmul):
    big = thn.build(matmul_schedule(96))  # exact mode: ~1M interpreted iterations, many seconds
    args = big.random_inputs(seed=0)
    controls = ui.RunControls("Emulate & compare", "play", "thn-compare-button")
    seen, fractions = [], []
    run = controls.start(lambda progress: big.emulate(*args, mode="exact",
                                                      progress=lambda f: (fractions.append(f), progress(f))),
                         lambda outcome, error: seen.append(error))
    assert controls.button.disabled and controls.cancel_button.layout.display != "none"
    assert controls.start(lambda progress: None, lambda *a: None) is None  # a second click runs nothing
    deadline = time.monotonic() + 20
    while not fractions and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert not run.join(0)  # still running
    assert 0 < controls.bar.value < 1 and "left" in controls.eta.value
    start = time.monotonic()
    controls.cancel_button.click()
    assert run.join(1.0), "cancel did not stop the emulation within 1 s"
    assert time.monotonic() - start < 1.0
    assert isinstance(seen[0], KeyboardInterrupt)
    assert controls.eta.value == "cancelled" and not controls.button.disabled
    assert not run.thread.is_alive() or run.thread.join(1.0) is None


def test_kernel_interrupt_cancels_a_running_run(matmul):
    big = thn.build(matmul_schedule(96))
    args = big.random_inputs(seed=0)
    controls = ui.RunControls("Emulate & compare", "play", "thn-compare-button")
    seen = []
    run = controls.start(lambda progress: big.emulate(*args, mode="exact", progress=progress),
                         lambda outcome, error: seen.append(error))
    time.sleep(0.5)
    start = time.monotonic()
    ui.runs._on_sigint(signal.SIGINT, None)  # what Kernel > Interrupt delivers while the kernel is idle
    assert run.join(1.0) and time.monotonic() - start < 1.0
    assert isinstance(seen[0], KeyboardInterrupt)


def test_find_first_divergent_pass_names_the_broken_pass(broken):
    ex = ui.explorer(broken, reference=blur_reference)
    shown = click(ex.divergence)
    bad = broken.stage(BROKEN_PASS)
    assert f"first divergent pass: {bad.label}" in shown and "MISMATCH" in shown
    prev_ok = ex.divergence.last_result.previous
    assert prev_ok.short_name == "FlattenBuffer"
    a = np.random.default_rng(1).uniform(-1, 1, (16, 17)).astype("float32")
    out_prev, out_bad = np.zeros((16, 16), "float32"), np.zeros((16, 16), "float32")
    broken.emulate(a, out_prev, stage=prev_ok.index)
    broken.emulate(a, out_bad, stage=bad.index)
    np.testing.assert_allclose(out_prev, blur_reference(a), rtol=1e-6)
    np.testing.assert_allclose(out_bad, blur_reference(a) / 2, rtol=1e-6)
    assert ex.pass_list.value == bad.index  # ... and the explorer selects that pass


def test_find_first_divergent_pass_says_when_none_differs():
    hm = thn.build(blur_schedule())
    ex = ui.explorer(hm, reference=blur_reference)
    shown = click(ex.divergence)
    emulated = [s for s in hm.stages if s.emulatable and (s.index == 0 or s.changed)]
    assert shown.startswith("No divergent pass") and f"all {len(emulated)} emulated stages MATCH" in shown


def test_broken_kernel_against_native_diverges_at_the_input_stage(broken):
    ex = ui.explorer(broken)
    assert "the input stage already differs" in click(ex.divergence)


def test_failed_lowering_keeps_the_stages_and_shows_the_failure_last():
    sch = vectorize_symbolic()
    with pytest.raises(BuildError) as caught:
        thn.build(sch)
    err = caught.value
    assert err.failure.pass_name == "tirx.VectorizeLoop"
    assert [s.name for s in err.stages][-1] != "tirx.VectorizeLoop" and len(err.stages) == err.failure.stage_number
    hm = thn.build(sch, on_failure="keep")
    assert hm.failure.pass_name == "tirx.VectorizeLoop"
    assert "Failed to vectorize loop with extent n" in hm.failure.message
    ex = ui.explorer(hm)
    label, value = ex.pass_list.options[-1]
    assert label == f"✗ {hm.failure.stage_number} tirx.VectorizeLoop — failed"
    assert ex.pass_list.value == value == ex.failed_index  # the failure is what the explorer opens on
    panel = ex.panel(ex.failed_index)
    message = text_of(panel.message.value)
    assert "Failed to vectorize loop with extent n" in message and "VectorizeLoop" in message
    assert "thn-failure-message" in panel.message.value and "overflow:auto" in panel.message.value
    before = hm.stages[-1]
    assert panel.before.views.value == "Hybrid Python" and "def main(" in text_of(panel.before.content.value)
    # The IR before the pass is emulatable and matches the input stage's emulation.
    shown = click(panel.before.compare)
    assert shown.startswith("MATCH") and "input stage (emulated)" in shown and before.label in shown
    a = np.arange(8, dtype="float32")
    b = np.zeros(8, "float32")
    hm.emulate(a, b, stage=before.index)
    np.testing.assert_array_equal(b, a * 2)


def test_explorer_display_bundle_has_widget_view_html_and_text(matmul):
    ex = ui.explorer(matmul)
    bundle = ex._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == ex.model_id
    assert "thn-pass-table" in bundle["text/html"]
    assert bundle["text/plain"].startswith("<HybridModule main(A: float32[16, 16]")


def test_closing_an_explorer_closes_every_widget_it_made(matmul):
    before = len(widgets.Widget.widgets)
    ex = ui.explorer(matmul)
    ex.panel(matmul.stage("FlattenBuffer").index).views.value = "Diff"
    assert len(widgets.Widget.widgets) > before + 20
    ex.close()
    assert len(widgets.Widget.widgets) == before


def test_fifty_pass_kernel_appears_fast(matmul):
    fresh = thn.build(matmul_schedule(32))
    start = time.perf_counter()
    ex = ui.explorer(fresh)
    elapsed = time.perf_counter() - start
    assert len(ex.pass_list.options) == len(fresh.stages) >= 50
    assert elapsed < 3.0, f"explorer with every pass took {elapsed:.2f} s"


def _overrunning_kernel():
    """B = 2 A over 16x16 where a deliberately wrong pass makes the inner loop run 5 times, not 4."""
    import tvm_ffi
    from tvm import s_tir, te, tirx

    def grow(node):
        if isinstance(node, tirx.For) and isinstance(node.extent, tirx.IntImm) and node.extent.value == 4:
            return tirx.For(node.loop_var, node.min, tirx.IntImm(node.extent.ty, 5), node.kind, node.body,
                            node.thread_binding, node.annotations)
        return node

    A = te.placeholder((16, 16), "float32", name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] * 2.0, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    sch.split(sch.get_loops(sch.get_sblock("B"))[1], [None, 4])
    return thn.build(tvm_ffi.structural_map(sch.mod, (tirx.For, grow)))


def test_a_failing_emulation_keeps_the_verdict_and_names_the_shown_source_line():
    hm = _overrunning_kernel()  # never run natively: the compiled kernel would write out of bounds
    ex = ui.explorer(hm, reference=lambda a: a * 2)
    panel = ex.panel(0).compare
    shown = click(panel)
    assert shown.startswith("MISMATCH")  # the verdict stays, the error is added
    assert "failed part-way" in shown and "out-of-bounds read of A[0, 16]" in shown
    line = int(re.search(r"at line (\d+) of the shown source", shown).group(1))
    source = hm.get_source().splitlines()
    assert source[line - 1].strip().startswith("store(B, (v_i, v_j)")  # the line the view shows
    # The fast-mode run itself names a line of generated code the view does not show.
    with pytest.raises(EmulationError) as raw:
        hm.emulate(*hm.random_inputs(seed=0), mode="fast", check=True)
    raw_line = int(re.search(r"at line (\d+)", str(raw.value)).group(1))
    assert raw_line != line
    assert len(panel.heatmaps.children) == 1
    assert "MISMATCH" in click(ex.divergence) and "shown source" in text_of(ex.divergence.result.value)


def test_gpu_kernels_after_split_host_device_report_progress_per_block():
    from tvm_hybrid_nb.examples import gpu_tiled_matmul

    example = gpu_tiled_matmul()
    hm = thn.build(example.obj, target="cuda")
    last = hm.stages[hm.packed_api_index - 1]
    assert last.module_functions  # the host launches a device kernel at this stage
    args = hm.random_inputs(seed=0)
    fractions = []
    out = hm.emulate(*[a.copy() for a in args], stage=last.index, mode="fast", progress=fractions.append)
    assert len(fractions) >= 4 and fractions == sorted(fractions) and fractions[-1] == 1.0  # per block row
    inputs = [a for a, p in zip(args, hm.params) if not p.is_output]
    np.testing.assert_allclose(out, example.reference(*inputs), rtol=1e-4, atol=1e-4)


def test_cancel_stops_a_run_that_never_reports_progress():
    controls = ui.RunControls("Emulate & compare", "play", "thn-compare-button")
    seen = []

    def busy(progress):
        total = 0
        while True:  # pure Python, no progress report: only the asynchronous stop can end it
            total += 1

    run = controls.start(busy, lambda outcome, error: seen.append(error))
    time.sleep(0.3)
    start = time.monotonic()
    controls.cancel()
    assert run.join(1.0) and time.monotonic() - start < 1.0
    assert isinstance(seen[0], KeyboardInterrupt) and controls.eta.value == "cancelled"


@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_an_exception_from_the_progress_callback_stops_the_emulation_unchanged(mode):
    hm = thn.build(matmul_schedule(64))

    class Stop(Exception):
        pass

    calls = []

    def progress(fraction):
        calls.append(fraction)
        if len(calls) == 2:
            raise Stop("enough")

    a, b, c = hm.random_inputs(seed=0)
    with pytest.raises(Stop, match="enough"):
        hm.emulate(a, b, c, mode=mode, progress=progress)
    assert len(calls) == 2  # nothing ran after the stop was asked for
    assert not np.allclose(c, a @ b)  # and the output is unfinished


@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_few_outer_iterations_let_the_loop_inside_report_progress(mode):
    from tvm import s_tir, te

    S = te.placeholder((4, 4096), "float32", name="S")
    r = te.reduce_axis((0, 4096), name="r")
    R = te.compute((4,), lambda i: te.sum(S[i, r], axis=r), name="R")
    hm = thn.build(s_tir.Schedule(te.create_prim_func([S, R])))
    s, out = hm.random_inputs(seed=0)
    fractions = []
    hm.emulate(s, out, mode=mode, progress=fractions.append)
    assert len(fractions) >= 4096 and fractions == sorted(fractions) and fractions[-1] == 1.0
    np.testing.assert_allclose(out, s.sum(axis=1), rtol=1e-4)


def test_compare_gives_the_verdict_then_the_sanitizers_verdict_under_it():
    from test_gpu import _in_place_exchange, _with_barrier

    def want(x):
        return np.concatenate([x[:32][::-1], x[32:][::-1]])

    clean = ui.explorer(thn.build(_with_barrier, target="cuda"), reference=want)
    shown = click(clean.panel(0).compare)
    assert shown.startswith("MATCH")
    assert "Sanitizers: no data race, out-of-bounds access or read of unwritten memory" in shown
    # The lockstep run of a kernel racing within one statement matches; only the sanitizers see the race.
    racy = ui.explorer(thn.build(_in_place_exchange, target="cuda"), reference=want)
    panel = racy.panel(0).compare
    shown = click(panel)
    assert shown.startswith("MATCH") and "Sanitizers:" in shown and "data race on S[" in shown
    assert panel.last_result is not None and panel.last_result.ok
