"""presentation: HTML from plain data (pygments, difflib, matplotlib heat maps)."""
from __future__ import annotations

import difflib
import html
import io
import re

import numpy as np
import pytest

from tvm_hybrid_nb import presentation as P
from tvm_hybrid_nb.compare import CompareResult, compare_arrays


def text_of(fragment: str) -> str:
    """The visible text of an HTML fragment."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_python_highlighting_is_inline_styled_and_keeps_the_code():
    code = "def f(a, b):\n    return a < b and 'x' != \"y\"\n"
    out = P.highlight_python(code)
    assert text_of(out).strip() == code.strip()
    assert 'style="' in out and "<style" not in out  # renders without any stylesheet
    assert "class=\"k\"" not in out                   # pygments token classes would need CSS
    assert "&lt;" in out and "<b>" not in text_of(out)


def test_unified_diff_matches_difflib_and_is_empty_for_equal_text():
    before, after = "a\nb\nc\n", "a\nB\nc\nd\n"
    expected = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), "x", "y"))
    assert P.unified_diff(before, after, "x", "y") == expected
    assert P.unified_diff(before, before) == ""
    assert "No change" in text_of(P.diff_html(before, before, "x", "y"))
    shown = text_of(P.diff_html(before, after, "x", "y"))
    assert "-b" in shown and "+B" in shown and "+d" in shown


def _result(actual, expected) -> CompareResult:
    return CompareResult(stage="3 Pass", reference="ref", outputs=[compare_arrays("C", actual, expected)],
                         emulate_seconds=0.0123, reference_seconds=0.0004)


def test_compare_html_reports_verdict_errors_counts_and_times():
    a = np.arange(12, dtype="float32").reshape(3, 4)
    b = a.copy()
    ok = text_of(P.compare_html(_result(a, b)))
    assert ok.startswith("MATCH") and "0/12 mismatches" in ok
    assert "12.3 ms" in ok and "0.400 ms" in ok
    b[1, 2] += 5.0
    bad = text_of(P.compare_html(_result(a, b)))
    assert bad.startswith("MISMATCH")
    assert "max abs err 5" in bad and "1/12 mismatches" in bad and "first at (1, 2)" in bad


def _png_pixels(png: bytes) -> np.ndarray:
    import matplotlib.image as mpimg

    return mpimg.imread(io.BytesIO(png), format="png")


def _red_pixels(img: np.ndarray) -> int:
    r, g = img[..., 0], img[..., 1]
    return int(np.count_nonzero(r - g > 0.3))  # the "Reds" colour map: strong red, little green


@pytest.mark.parametrize("shape", [(7,), (6, 5), (2, 3, 4)])
def test_heatmap_is_a_png_whose_red_area_grows_with_the_mismatches(shape):
    none = np.zeros(shape, bool)
    few = none.copy()
    few.flat[0] = True
    many = np.ones(shape, bool)
    png_none, png_few, png_many = P.heatmap_png(none), P.heatmap_png(few), P.heatmap_png(many)
    assert png_few[:8] == b"\x89PNG\r\n\x1a\n"
    red_none, red_few, red_many = (_red_pixels(_png_pixels(p)) for p in (png_none, png_few, png_many))
    # The colour bar is the same in all three; the cells make the difference.
    assert red_many - red_none > 2 * (red_few - red_none) > 0


def test_heatmap_leaves_pyplot_state_alone():
    import matplotlib

    backend = matplotlib.get_backend()
    P.heatmap_png(np.eye(4, dtype=bool))
    assert matplotlib.get_backend() == backend


# -- module_html with a real HybridModule ------------------------------------------------------
@pytest.fixture(scope="module")
def matmul_module():
    import tvm_hybrid_nb as thn
    from nb_kernels import matmul_schedule

    return thn.build(matmul_schedule())


def test_module_html_shows_highlighted_source_and_a_pass_table(matmul_module):
    hm = matmul_module
    out = hm._repr_html_()
    assert out == P.module_html(hm)
    visible = text_of(out)
    for line in hm.get_source(0).splitlines():
        if line.strip():
            assert line.strip() in visible
    rows = re.findall(r'<tr class="thn-pass-row"', out)
    assert len(rows) == len(hm.stages)
    assert f"{sum(s.changed for s in hm.stages[1:])} passes changed the IR" in visible
    assert "FlattenBuffer" in visible and "MakePackedAPI" in visible
    assert "<style" not in out


def test_module_html_of_an_unemulatable_kernel_says_why_and_shows_tvmscript():
    import tvm_hybrid_nb as thn
    from tvm import te, tirx

    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: tirx.call_pure_extern("float32", "cosf", A[i]), name="B")
    hm = thn.build([A, B])
    visible = text_of(P.module_html(hm))
    assert "No hybrid source" in visible and "call_pure_extern" in visible
    # The signature comes from the parameters, which translate even when the body does not.
    assert "T.prim_func" in visible and "main(A: float32[8], B: float32[8])" in visible
    assert "main(A: float32[8], B: float32[8])" in repr(hm)


# -- explorer views ------------------------------------------------------------------------------
HYBRID = '''"""Hybrid script."""
import numpy as np

def helper(x):
    return x

def main(A, B):
    """Parameters."""
    for i in range(4):
        B[i] = helper(A[i])

def after(y):
    return y
'''


def test_kernel_first_puts_main_on_top_with_file_line_numbers_and_folds_the_helpers():
    out = P.kernel_first_html(HYBRID, "main")
    kernel, helpers = out.split('<details class="thn-helpers">')
    shown = [ln for ln in text_of(kernel).splitlines() if ln.strip()]
    assert re.match(r"^\s*7\s*def main\(A, B\):", shown[0])  # line 7 of the file, shown first
    assert "helper(A[i])" in text_of(kernel) and "def helper" not in text_of(kernel)
    assert "helpers (6 lines)" in helpers  # the 6 non-blank lines outside main
    assert re.search(r"^\s*4\s*def helper", text_of(helpers), re.M)
    assert re.search(r"^\s*12\s*def after", text_of(helpers), re.M)
    assert P.kernel_span(HYBRID, "main") == (7, 10)


def test_side_by_side_diff_highlights_within_lines_and_can_hide_attributes():
    before = 'T.func_attr({"target": T.target("llvm")})\nx = a + b\nsame\n'
    after = 'T.func_attr({"target": T.target("cuda")})\nx = a * b\nsame\n'
    out = P.side_by_side_diff_html(before, after, "1 A", "2 B")
    assert "<table" in out and "1 A" in out and "2 B" in out
    changed = re.findall(r'<span class="diff_chg">([^<]*)</span>', out)
    assert sorted(changed) == sorted(["llvm", "cuda", "+", "*"])  # only the changed characters are marked
    assert 'T.target(' in text_of(out)
    hidden = P.side_by_side_diff_html(before, after, "1 A", "2 B", attributes=False)
    assert "func_attr" not in hidden and "a\xa0*\xa0b" in text_of(hidden)
    assert "No change" in P.side_by_side_diff_html("a\n", "a\n", "x", "y")
    assert "No change" in P.side_by_side_diff_html(before, before.replace("llvm", "cuda"), "x", "y",
                                                   attributes=False)


def test_error_heat_map_uses_a_log_scale_and_a_transparent_background():
    errors = np.zeros((8, 8))
    errors[1, 1], errors[5, 5] = 1e-6, 1e2
    png = P.heatmap_png(errors, outline=errors > 1e-3)
    img = _png_pixels(png)
    assert img.shape[-1] == 4 and img[0, 0, 3] == 0  # transparent corner
    # On a log scale the 1e-6 cell is visibly coloured too (linear: invisible next to 1e2).
    reds = img[..., 0] - img[..., 1]
    assert _red_pixels(img) > 0 and np.count_nonzero(reds > 0.05) > np.count_nonzero(reds > 0.5)


def test_theme_css_has_dark_pygments_tokens_and_status_colours_with_enough_contrast():
    css = P.THEME_CSS
    assert 'body[data-jp-theme-light="false"] .thn-hl .k' in css
    dark_bg = (0x11, 0x11, 0x11)  # JupyterLab Dark's --jp-layout-color0

    def luminance(rgb):
        def channel(v):
            v /= 255
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
        r, g, b = (channel(c) for c in rgb)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    def contrast(a, b):
        hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
        return (hi + 0.05) / (lo + 0.05)

    dark = dict(re.findall(r"--thn-(\w+):#([0-9a-f]{6})", css))
    for name in ("ok", "bad", "warning"):
        rgb = tuple(int(dark[name][i:i + 2], 16) for i in (0, 2, 4))
        assert contrast(rgb, dark_bg) >= 4.5, name
    for light in ("1a7f37", "cf222e", "8a5c00", "595959"):  # the fallbacks, on white
        assert contrast(tuple(int(light[i:i + 2], 16) for i in (0, 2, 4)), (255, 255, 255)) >= 4.5, light
