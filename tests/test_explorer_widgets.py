"""The explorer widgets, without a browser: build them, click buttons, read .value/.children/.titles."""
from __future__ import annotations

import html
import re

import numpy as np
import pytest
import tvm_ffi

import ipywidgets as widgets

import tvm_hybrid_nb as thn
from nb_kernels import BROKEN_PASS, blur_reference, blur_schedule, build_broken_blur, matmul_schedule
from tvm_hybrid_nb import ui


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


@pytest.fixture(scope="module")
def matmul():
    return thn.build(matmul_schedule())


@pytest.fixture(scope="module")
def broken():
    return build_broken_blur()


def changed_indices(hm) -> list[int]:
    """Independent truth: stages whose module differs structurally from the one before."""
    return [s.index for s in hm.stages[1:]
            if not tvm_ffi.structural_equal(hm.stages[s.index - 1].mod, s.mod)]


def test_tabs_are_source_plus_the_passes_that_changed_the_ir(matmul):
    ex = ui.explorer(matmul)
    changed = changed_indices(matmul)
    assert 5 <= len(changed) <= 15
    assert ex.tab.titles[0] == "Source"
    assert list(ex.tab.titles[1:]) == [matmul.stages[i].label for i in changed]
    flat = matmul.stage("FlattenBuffer")
    assert f"{flat.number} FlattenBuffer" in ex.tab.titles
    assert ex.tab.selected_index == 0


def test_tabs_are_built_on_first_selection(matmul):
    fresh = thn.build(matmul_schedule())  # no stage text rendered yet
    ex = ui.explorer(fresh)
    placeholders = [c for c in ex.tab.children[1:] if "thn-placeholder" in c._dom_classes]
    assert len(placeholders) == len(ex.tab.children) - 1
    assert all(s._script is None for s in fresh.stages[1:])  # nothing printed for unselected tabs
    position = ex.tab.titles.index(fresh.stage("FlattenBuffer").label)
    ex.tab.selected_index = position
    panel = ex.tab.children[position]
    assert "thn-placeholder" not in panel._dom_classes
    assert isinstance(panel.views, widgets.ToggleButtons)
    assert ex.tab.titles[position] == fresh.stage("FlattenBuffer").label  # titles survive the swap


def test_view_switch_shows_tvmscript_hybrid_python_and_the_diff(matmul):
    ex = ui.explorer(matmul)
    flat = matmul.stage("FlattenBuffer")
    prev = matmul.stages[flat.index - 1]
    panel = ex.panel(flat.index)
    assert panel.views.options == ("TVMScript", "Hybrid Python", "Diff")
    assert panel.views.value == "Hybrid Python"
    assert text_of(panel.content.value).strip() == flat.source.strip()
    panel.views.value = "TVMScript"
    assert text_of(panel.content.value).strip() == flat.script.strip()
    panel.views.value = "Diff"
    diff = text_of(panel.content.value)
    new_lines = set(flat.script.splitlines()) - set(prev.script.splitlines())
    old_lines = set(prev.script.splitlines()) - set(flat.script.splitlines())
    assert new_lines and old_lines
    for line in new_lines:
        assert "+" + line in diff
    for line in old_lines:
        assert "-" + line in diff
    info = text_of(panel.info.value)
    assert "tirx.FlattenBuffer" in info and "ms" in info


def test_show_every_pass_toggle_keeps_the_selected_stage(matmul):
    ex = ui.explorer(matmul)
    flat = matmul.stage("FlattenBuffer")
    ex.select_stage(flat.index)
    ex.show_all.value = True
    assert len(ex.tab.titles) == len(matmul.stages)
    assert ex.tab.titles[ex.tab.selected_index] == flat.label
    unchanged = next(s for s in matmul.stages[1:] if not s.changed)
    panel = ex.panel(unchanged.index)
    panel.views.value = "Diff"
    assert "No change" in text_of(panel.content.value)
    ex.show_all.value = False  # the selected (unchanged) pass disappears: back to Source
    assert len(ex.tab.titles) == 1 + len(changed_indices(matmul))
    assert ex.tab.titles[ex.tab.selected_index] == "Source"
    ex.show_all.value = True
    ex.select_stage(flat.index)
    ex.show_all.value = False
    assert ex.tab.titles[ex.tab.selected_index] == flat.label


def test_emulate_and_compare_on_the_source_tab_matches_native(matmul):
    ex = ui.explorer(matmul)
    source = ex.tab.children[0]
    assert source.compare.button.description == "Emulate & compare"
    source.compare.button.click()
    shown = text_of(source.compare.result.value)
    assert shown.startswith("MATCH") and "vs native" in shown
    assert "0/256 mismatches" in shown and "emulation" in shown and "reference" in shown
    assert source.compare.heatmaps.children == ()
    # Independent check of what was compared: the emulation equals numpy on the same seeded inputs.
    a, b, c = matmul.random_inputs(seed=0)
    matmul.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_wrong_reference_gives_mismatch_and_a_heat_map_per_output(matmul):
    def off_by_one_row(a, b):
        out = a @ b
        out[3] += 1.0
        return out

    ex = ui.explorer(matmul, reference=off_by_one_row)
    panel = ex.tab.children[0].compare
    panel.button.click()
    shown = text_of(panel.result.value)
    assert shown.startswith("MISMATCH") and "vs off_by_one_row" in shown
    assert "16/256 mismatches" in shown and "first at (3, 0)" in shown
    (image,) = panel.heatmaps.children
    assert isinstance(image, widgets.Image) and image.value[:4] == b"\x89PNG"


def test_every_emulatable_pass_tab_compares_that_stage(matmul):
    ex = ui.explorer(matmul)
    for stage in matmul.stages[1:]:
        if not stage.changed:
            continue
        panel = ex.panel(stage.index)
        if stage.emulatable:
            panel.compare.button.click()
            shown = text_of(panel.compare.result.value)
            assert shown.startswith("MATCH") and f"stage {stage.label}" in shown
        else:
            assert panel.compare is None
            assert "Cannot be emulated" in text_of(panel.info.value)
            assert stage.reason in text_of(panel.info.value)


def test_given_inputs_are_the_ones_compared(matmul):
    a = np.eye(16, dtype="float32")
    b = np.arange(256, dtype="float32").reshape(16, 16)
    seen = []

    def reference(x, y):
        seen.append((x.copy(), y.copy()))
        return x @ y

    ex = ui.explorer(matmul, reference=reference, inputs=[a, b, np.zeros((16, 16), "float32")])
    ex.tab.children[0].compare.button.click()
    assert text_of(ex.tab.children[0].compare.result.value).startswith("MATCH")
    np.testing.assert_array_equal(seen[0][0], a)
    np.testing.assert_array_equal(seen[0][1], b)


def test_button_errors_are_one_line_and_do_not_raise(matmul):
    def reference(a, b):
        raise RuntimeError("reference exploded\nsecond line")

    ex = ui.explorer(matmul, reference=reference)
    panel = ex.tab.children[0].compare
    panel.button.click()  # must not raise
    shown = text_of(panel.result.value)
    assert "RuntimeError: reference exploded" in shown and "second line" not in shown
    ex.divergence.button.click()
    assert "RuntimeError: reference exploded" in text_of(ex.divergence.result.value)
    wrong_count = ui.explorer(matmul, inputs=[np.zeros((16, 16), "float32")])
    wrong_count.tab.children[0].compare.button.click()
    assert "expected 3 arguments" in text_of(wrong_count.tab.children[0].compare.result.value)


def test_find_first_divergent_pass_names_the_broken_pass(broken):
    ex = ui.explorer(broken, reference=blur_reference)
    ex.divergence.button.click()
    shown = text_of(ex.divergence.result.value)
    bad = broken.stage(BROKEN_PASS)
    assert f"first divergent pass: {bad.label}" in shown and "MISMATCH" in shown
    prev_ok = ex.divergence.last_result.previous
    assert prev_ok.short_name == "FlattenBuffer"
    # Independent truth: the stage before the broken pass agrees with numpy, the broken one does not.
    a = np.random.default_rng(1).uniform(-1, 1, (16, 17)).astype("float32")
    out_prev, out_bad = np.zeros((16, 16), "float32"), np.zeros((16, 16), "float32")
    broken.emulate(a, out_prev, stage=prev_ok.index)
    broken.emulate(a, out_bad, stage=bad.index)
    np.testing.assert_allclose(out_prev, blur_reference(a), rtol=1e-6)
    np.testing.assert_allclose(out_bad, blur_reference(a) / 2, rtol=1e-6)
    # ... and the explorer shows that pass's tab.
    assert ex.tab.titles[ex.tab.selected_index] == bad.label


def test_find_first_divergent_pass_says_when_none_differs():
    hm = thn.build(blur_schedule())
    ex = ui.explorer(hm, reference=blur_reference)
    ex.divergence.button.click()
    shown = text_of(ex.divergence.result.value)
    emulated = [s for s in hm.stages if s.emulatable and (s.index == 0 or s.changed)]
    assert shown.startswith("No divergent pass") and f"all {len(emulated)} emulated stages MATCH" in shown


def test_broken_kernel_against_native_diverges_at_the_input_stage(broken):
    # The native build was compiled from the broken IR, so stage 0 (correct) is what differs.
    ex = ui.explorer(broken)
    ex.divergence.button.click()
    assert "the input stage already differs" in text_of(ex.divergence.result.value)


def test_explorer_display_bundle_has_widget_view_html_and_text(matmul):
    ex = ui.explorer(matmul)
    bundle = ex._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == ex.model_id
    assert "thn-pass-table" in bundle["text/html"]
    assert bundle["text/plain"].startswith("<HybridModule main(A: float32[16, 16]")
    assert "FlattenBuffer" in bundle["text/plain"]


def test_fifty_pass_kernel_appears_fast(matmul):
    import time

    fresh = thn.build(matmul_schedule(32))
    start = time.perf_counter()
    ex = ui.explorer(fresh)
    ex.show_all.value = True
    elapsed = time.perf_counter() - start
    assert len(ex.tab.titles) == len(fresh.stages) >= 50
    assert elapsed < 2.0, f"explorer with every pass took {elapsed:.2f} s"
