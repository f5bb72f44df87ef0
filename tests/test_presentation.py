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
