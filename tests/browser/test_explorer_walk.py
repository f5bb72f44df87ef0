"""A walk through the explorer in a real JupyterLab: the failure view, the kernel-first view, the
pass list filter and keys, any-two-stage diffs, progress and Cancel, a schedule error's IR.

One notebook (written here) holds every kernel; it runs once and each test uses its explorers.
Selectors are scoped to cell outputs (``.jp-OutputArea-output``).
"""
from __future__ import annotations

import re
import time

import nbformat
import pytest

from conftest import OUT, kernel_status, open_notebook, run_all, screenshot_dir, select_matching, shut_down_kernels

pytestmark = pytest.mark.browser

CELLS = [
    """%load_ext tvm_hybrid_nb
from tvm import te, s_tir""",
    # 0: lowering fails in tirx.VectorizeLoop (a symbolic extent cannot be vectorized on a CPU)
    """%%hybrid_build failed_mod
n = te.var("n")
X = te.placeholder((n,), "float32", name="X")
Y = te.compute((n,), lambda i: X[i] * 2.0, name="Y")
vsch = s_tir.Schedule(te.create_prim_func([X, Y]))
vsch.vectorize(vsch.get_loops(vsch.get_sblock("Y"))[0])
vsch""",
    # 1: a parallel, vectorized matmul
    """%%hybrid_build mm
A = te.placeholder((64, 64), "float32", name="A")
B = te.placeholder((64, 64), "float32", name="B")
k = te.reduce_axis((0, 64), name="k")
C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
i, j, kk = sch.get_loops(sch.get_sblock("C"))
jo, ji = sch.split(j, [None, 8])
sch.reorder(i, jo, kk, ji)
sch.parallel(i)
sch.vectorize(ji)
sch""",
    # 2: a long reduction: its emulation takes tens of seconds (a serial loop of 2**20 steps)
    """%%hybrid_build slow
S = te.placeholder((4, 1 << 20), "float32", name="S")
r = te.reduce_axis((0, 1 << 20), name="r")
R = te.compute((4,), lambda i: te.sum(S[i, r], axis=r), name="R")
s_tir.Schedule(te.create_prim_func([S, R]))""",
    # last: a schedule error (Run All stops here)
    """%%hybrid_build bad_schedule
P = te.placeholder((16, 16), "float32", name="P")
q = te.reduce_axis((0, 16), name="q")
Q = te.compute((16,), lambda i: te.sum(P[i, q], axis=q), name="Q")
psch = s_tir.Schedule(te.create_prim_func([P, Q]))
psch.parallel(psch.get_loops(psch.get_sblock("Q"))[1])
psch""",
]


@pytest.fixture(scope="module")
def walk(lab, browser):
    from playwright.sync_api import expect

    base, token, home, root = lab
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "walk.ipynb")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    open_notebook(page, base, token, "walk.ipynb", expect)
    run_all(page)
    expect(page.locator(f"{OUT} .thn-tvm-error")).to_have_count(1, timeout=180_000)
    expect(page.locator(f"{OUT} .thn-explorer")).to_have_count(3)
    yield page, expect
    page.screenshot(path=str(screenshot_dir() / "thn_walk_last.png"), full_page=True)
    page.close()
    shut_down_kernels(base, token)


def explorer(page, position: int):
    return page.locator(f"{OUT} .thn-explorer").nth(position)


def test_failure_view_shows_tvms_message_and_the_ir_before_the_pass(walk):
    page, expect = walk
    ex = explorer(page, 0)
    last = ex.locator(".thn-pass-list option").last
    expect(last).to_have_text(re.compile(r"^✗\s\d+\stirx\.VectorizeLoop\s—\sfailed\s*$"))
    message = ex.locator(".thn-detail .thn-failure-message")
    expect(message).to_contain_text("Failed to vectorize loop with extent n")
    assert message.evaluate("e => getComputedStyle(e).overflow") == "auto"
    assert "monospace" in message.evaluate("e => getComputedStyle(e).fontFamily").lower() or \
        "mono" in message.evaluate("e => getComputedStyle(e).fontFamily").lower()
    expect(ex.locator(".thn-detail .thn-kernel-first")).to_contain_text("def main(")
    ex.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir() / "thn_walk_failure.png"))


def test_kernel_first_view_with_helpers_folded(walk):
    page, expect = walk
    ex = explorer(page, 1)
    select_matching(ex.locator(".thn-pass-list select"), r"^\s*\d+\stirx\.VectorizeLoop\s")
    view = ex.locator(".thn-detail .thn-kernel-first")
    expect(ex.locator(".thn-detail")).to_contain_text("Pass tirx.VectorizeLoop")
    lines = [ln for ln in view.inner_text().splitlines() if ln.strip()]
    assert any("def main(" in ln for ln in lines[:10]), lines[:10]
    expect(view.locator("details.thn-helpers > summary")).to_have_text(re.compile(r"^helpers\s\(\d+\slines\)$"))
    ex.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir() / "thn_walk_kernel_first.png"))


def test_fast_mode_plan_and_the_two_verdicts_of_emulate_and_compare(walk):
    page, expect = walk
    ex = explorer(page, 1)
    select_matching(ex.locator(".thn-pass-list select"), r"^\s*0\sinput\s")
    detail = ex.locator(".thn-detail")
    plan = detail.locator("details.thn-plan")
    expect(plan.locator("summary")).to_contain_text("k stays serial: carried dependence on C")
    expect(plan.locator("pre")).to_be_hidden()  # folded until asked
    plan.locator("summary").click()
    expect(plan.locator("pre")).to_contain_text("i: parallel chunks")
    detail.locator(".thn-compare-button").click()
    result = detail.locator(".thn-compare-result")
    expect(result).to_contain_text("MATCH", timeout=60_000)
    expect(result).to_contain_text("Sanitizers: no data race", timeout=60_000)
    detail.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir() / "thn_walk_plan.png"))


def test_pass_list_filter_and_arrow_keys(walk):
    page, expect = walk
    ex = explorer(page, 1)
    box = ex.locator("input[placeholder='filter passes']")
    box.fill("")
    box.press_sequentially("simplify", delay=30)
    options = ex.locator(".thn-pass-list option")
    page.wait_for_function(
        "el => [...el.querySelectorAll('option')].every(o => /simplify/i.test(o.textContent))"
        " && el.querySelectorAll('option').length > 0",
        arg=ex.locator(".thn-pass-list select").element_handle(), timeout=10_000)
    names = [t.split()[1] for t in options.all_text_contents()]
    assert "s_tir.StmtSimplify" in names and "tirx.StmtSimplify" in names, names
    box.fill("")
    expect(options.first).to_have_text(re.compile(r"^\s*0\sinput"))
    select = ex.locator(".thn-pass-list select")
    select_matching(select, r"^\s*\d+\stirx\.FlattenBuffer\s")
    expect(ex.locator(".thn-detail")).to_contain_text("Pass tirx.FlattenBuffer")
    select.focus()
    page.keyboard.press("ArrowDown")
    expect(ex.locator(".thn-detail")).not_to_contain_text("Pass tirx.FlattenBuffer", timeout=10_000)
    page.keyboard.press("ArrowUp")
    expect(ex.locator(".thn-detail")).to_contain_text("Pass tirx.FlattenBuffer", timeout=10_000)


def test_diff_between_any_two_stages(walk):
    page, expect = walk
    ex = explorer(page, 1)
    select_matching(ex.locator(".thn-pass-list select"), r"^\s*\d+\stirx\.VectorizeLoop\s")
    detail = ex.locator(".thn-detail")
    expect(detail).to_contain_text("Pass tirx.VectorizeLoop")
    detail.locator("button", has_text=re.compile(r"^Diff$")).click()
    diff = detail.locator(".thn-diff-content")
    expect(diff.locator("table.diff")).to_be_visible()
    select_matching(detail.locator(".thn-diff-from select"), r"^0\sinput$")
    expect(diff).to_contain_text("0 input (TVMScript)")
    expect(diff).to_contain_text("VectorizeLoop (TVMScript)")
    assert diff.locator(".diff_add, .diff_chg, .diff_sub").count() > 0  # intra-line highlights
    expect(diff).to_contain_text("T.func_attr")
    detail.locator(".thn-hide-attributes input").check()
    expect(diff).not_to_contain_text("T.func_attr")
    detail.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir() / "thn_walk_diff.png"))


def test_progress_bar_and_cancel_stop_a_long_run(walk):
    page, expect = walk
    ex = explorer(page, 2)
    detail = ex.locator(".thn-detail")
    button = detail.locator(".thn-compare-button")
    button.click()
    expect(detail.locator(".thn-progress")).to_be_visible(timeout=10_000)
    expect(detail.locator(".thn-eta")).to_contain_text("left", timeout=30_000)
    expect(button).to_be_disabled()
    expect(kernel_status(page, "Idle")).to_be_visible()  # the run is off the kernel's main thread
    ex.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir() / "thn_walk_progress.png"))
    start = time.monotonic()
    detail.locator(".thn-cancel-button").click()
    expect(detail.locator(".thn-eta")).to_have_text("cancelled", timeout=2_000)
    assert time.monotonic() - start < 2.0
    expect(detail.locator(".thn-compare-result")).to_contain_text("cancelled")
    expect(button).to_be_enabled()
    expect(kernel_status(page, "Idle")).to_be_visible(timeout=2_000)


def test_kernel_interrupt_stops_a_long_run(walk):
    page, expect = walk
    ex = explorer(page, 2)
    detail = ex.locator(".thn-detail")
    button = detail.locator(".thn-compare-button")
    expect(button).to_be_enabled()
    button.click()
    expect(detail.locator(".thn-eta")).to_contain_text("left", timeout=30_000)
    start = time.monotonic()
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Kernel$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Interrupt Kernel$")).click()
    expect(detail.locator(".thn-eta")).to_have_text("cancelled", timeout=2_000)
    assert time.monotonic() - start < 2.0
    expect(kernel_status(page, "Idle")).to_be_visible(timeout=2_000)


def test_schedule_error_shows_the_ir_with_markers_folded(walk):
    page, expect = walk
    error = page.locator(f"{OUT} .thn-tvm-error")
    expect(error).to_contain_text("ScheduleError")
    pre = error.locator("details pre")
    expect(pre).to_be_hidden()
    error.locator("details > summary").click()
    expect(pre).to_be_visible()
    expect(pre).to_contain_text("^^^")
    expect(page.locator(OUT, has_text="UsageError")).to_have_count(1)


_CONTRAST_JS = """
el => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = c => { const [r, g, b] = c.slice(0, 3).map(v => { v /= 255;
    return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  let bg = null;
  for (let e = el; e; e = e.parentElement) {
    const c = rgb(getComputedStyle(e).backgroundColor);
    if (c.length >= 3 && (c.length < 4 || c[3] > 0.5)) { bg = c; break; }
  }
  const fg = rgb(getComputedStyle(el).color);
  const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
  return (a + 0.05) / (b + 0.05);
}
"""


def test_dark_theme_keeps_text_readable(walk):
    page, expect = walk
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Settings$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Theme$")).hover()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^JupyterLab Dark$")).click()
    page.wait_for_function("document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
    ex = explorer(page, 1)
    select_matching(ex.locator(".thn-pass-list select"), r"^\s*\d+\stirx\.VectorizeLoop\s")
    detail = ex.locator(".thn-detail")
    expect(detail).to_contain_text("Pass tirx.VectorizeLoop")
    detail.locator("button", has_text=re.compile(r"^Hybrid Python$")).click()
    samples = [ex.locator(".thn-explorer-header .thn-note").first, detail.locator(".thn-stage-info .thn-note").first,
               detail.locator(".thn-kernel-first .thn-hl pre").first,
               detail.locator(".thn-kernel-first .thn-hl .k, .thn-kernel-first .thn-hl .kn").first,
               ex.locator(".thn-pass-list select").first]
    for sample in samples:
        ratio = sample.evaluate(_CONTRAST_JS)
        assert ratio >= 4.5, (sample, ratio)
    ex.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir() / "thn_walk_dark.png"))
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Settings$")).click()  # back to light
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Theme$")).hover()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^JupyterLab Light$")).click()
    page.wait_for_function("document.body.dataset.jpThemeLight === 'true'", timeout=30_000)
