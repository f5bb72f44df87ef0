"""A real browser opens the quickstart notebook in JupyterLab 4, runs it and uses the explorer.

Every selector is scoped to the cell output area (``.jp-OutputArea-output``): the notebook's own
source contains the same words, and finding them there would prove nothing.  A missing chromium
or JupyterLab fails the test (CI installs both); it is never skipped.
"""
from __future__ import annotations

import re

import pytest

from conftest import OUT, open_notebook, run_all, screenshot_dir, select_matching, shut_down_kernels

pytestmark = pytest.mark.browser


def test_quickstart_in_jupyterlab(lab, browser):
    from playwright.sync_api import expect

    base, token, home, _root = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _drive(page, base, token, expect)
    except Exception:
        page.screenshot(path=str(home / "failure.png"), full_page=True)
        print("screenshot:", home / "failure.png", "lab log:", home / "lab.log")
        raise
    finally:
        page.close()
        shut_down_kernels(base, token)


def _drive(page, base, token, expect):
    open_notebook(page, base, token, "notebooks/01_quickstart.ipynb", expect)
    run_all(page)

    # The last cell's output appears when the whole notebook has run.
    expect(page.locator(OUT, has_text="through the hybrid op matches numpy")).to_be_visible(timeout=150_000)
    explorer = page.locator(f"{OUT} .thn-explorer").first
    explorer.scroll_into_view_if_needed()
    detail = explorer.locator(".thn-detail")
    expect(detail).to_contain_text("def main(")  # stage 0: the hybrid script, kernel first

    # Pick a pass in the list: its panel replaces the input stage's.
    select_matching(explorer.locator(".thn-pass-list select"), r"^\s*\d+\stirx\.FlattenBuffer\s")
    expect(detail).to_contain_text("Pass tirx.FlattenBuffer (stage", timeout=30_000)
    for view in ("Hybrid Python", "TVMScript", "Diff"):
        expect(detail.locator("button", has_text=re.compile(f"^{view}$"))).to_be_visible()

    # The diff view: side by side, the flattened views appear on the right.
    detail.locator("button", has_text=re.compile(r"^Diff$")).click()
    expect(detail.locator(".thn-diff")).to_contain_text("A_1 = A.view(", timeout=30_000)

    # Emulate & compare this stage.
    detail.locator(".thn-compare-button").click()
    verdict = detail.locator(".thn-compare-result .thn-verdict")
    expect(verdict).to_contain_text("MATCH", timeout=60_000)
    text = verdict.inner_text()
    assert text.startswith("MATCH:") and "FlattenBuffer" in text, text
    expect(detail.locator(".thn-compare-result")).to_contain_text("0/1024 mismatches")
    page.screenshot(path=str(screenshot_dir() / "thn_browser_ok.png"))
