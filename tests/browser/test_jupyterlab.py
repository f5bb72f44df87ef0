"""A real browser opens the quickstart notebook in JupyterLab 4, runs it and uses the explorer.

Every selector is scoped to the cell output area (``.jp-OutputArea-output``): the notebook's own
source contains the same words, and finding them there would prove nothing.  A missing chromium
or JupyterLab fails the test (CI installs both); it is never skipped.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]
REPO = Path(__file__).resolve().parents[2]
OUT = ".jp-OutputArea-output"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(REPO / "notebooks", root / "notebooks")
    home = tmp_path_factory.mktemp("home")
    settings = home / "settings"
    # No news / update toasts over the page.
    notif = settings / "@jupyterlab" / "apputils-extension"
    notif.mkdir(parents=True)
    (notif / "notification.jupyterlab-settings").write_text(
        json.dumps({"checkForUpdates": False, "fetchNews": "false"}))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(home / "ws"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"), PYTHONUNBUFFERED="1")
    log = open(home / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0",
         "--allow-root",
         "--LabApp.news_url="],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        if proc.poll() is not None:
            raise RuntimeError("jupyter lab exited:\n" + (home / "lab.log").read_text()[-3000:])
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.time() > deadline:
            proc.terminate()
            raise RuntimeError("jupyter lab did not start:\n" + (home / "lab.log").read_text()[-3000:])
        time.sleep(0.5)
    yield base, token, home
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def test_quickstart_in_jupyterlab(lab):
    from playwright.sync_api import expect, sync_playwright

    base, token, home = lab
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: apt-get install -y chromium"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            _drive(page, base, token, expect)
        except Exception:
            page.screenshot(path=str(home / "failure.png"), full_page=True)
            print("screenshot:", home / "failure.png", "lab log:", home / "lab.log")
            raise
        finally:
            browser.close()


def _drive(page, base, token, expect):
    page.set_default_timeout(60_000)
    page.goto(f"{base}/lab/tree/notebooks/01_quickstart.ipynb?token={token}")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    # Wait until the kernel is connected and idle, or Run All would go nowhere.
    expect(page.locator(".jp-StatusBar-Widget, .jp-StatusBar-TextItem", has_text="| Idle").first).to_be_visible(
        timeout=90_000)

    # Run > Run All Cells.
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()

    # The last cell's output appears when the whole notebook has run.
    expect(page.locator(OUT, has_text="through the hybrid op matches numpy")).to_be_visible(timeout=150_000)
    explorer = page.locator(f"{OUT} .thn-explorer")
    expect(explorer).to_have_count(1)
    contents = explorer.locator(".widget-tab-contents").first
    before = contents.inner_text()
    assert "def main(" in before  # the Source tab: the hybrid script

    # Click a pass tab: its content replaces the source.
    tab = explorer.locator(".lm-TabBar-tab", has_text=re.compile(r"^\d+ FlattenBuffer$"))
    expect(tab).to_have_count(1)
    tab.click()
    expect(contents).to_contain_text("Pass tirx.FlattenBuffer took", timeout=30_000)
    after = contents.inner_text()
    assert after != before
    assert "Hybrid Python" in after and "TVMScript" in after and "Diff" in after

    # Switch to the diff view: the flattened views appear as added lines.
    contents.locator("button", has_text=re.compile(r"^Diff$")).click()
    expect(contents.locator(".thn-diff")).to_contain_text("+        A_1 = A.view(", timeout=30_000)

    # Emulate & compare in this pass tab.
    contents.locator(".thn-compare-button:visible").click()
    result = contents.locator(".thn-compare-result:visible")
    verdict = result.locator(".thn-verdict")
    expect(verdict).to_contain_text("MATCH", timeout=60_000)
    text = verdict.inner_text()
    assert text.startswith("MATCH:") and "FlattenBuffer" in text, text
    expect(result).to_contain_text("0/1024 mismatches")
    page.screenshot(path=str(Path(os.environ.get("THN_SCREENSHOT_DIR", "/tmp")) / "thn_browser_ok.png"))
