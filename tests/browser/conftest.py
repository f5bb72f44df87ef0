"""Browser tests: JupyterLab 4 driven by Playwright with Debian's chromium (no download).

One JupyterLab server and one chromium serve every browser test (session fixtures), so the whole
set stays within a few minutes on two cores.  A missing chromium or JupyterLab fails the tests (CI
installs both); they are never skipped.
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

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]
REPO = Path(__file__).resolve().parents[2]
#: Every selector is scoped to cell outputs: the notebook's source has the same words.
OUT = ".jp-OutputArea-output"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "browser: drives a real JupyterLab in Debian's chromium (needs /usr/bin/chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """(base url, token, home, root): a JupyterLab server over a copy of notebooks/."""
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
         "--allow-root", "--LabApp.news_url="],
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
    yield base, token, home, root
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: apt-get install -y chromium"
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


def screenshot_dir() -> Path:
    path = Path(os.environ.get("THN_SCREENSHOT_DIR", "/tmp"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def open_notebook(page, base: str, token: str, path: str, expect) -> None:
    """Open ``path`` in JupyterLab and wait until its kernel is idle."""
    page.set_default_timeout(60_000)
    # A workspace of its own: JupyterLab would otherwise reopen the notebooks of earlier tests.
    workspace = re.sub(r"\W", "-", path)
    page.goto(f"{base}/lab/workspaces/{workspace}/tree/{path}?token={token}&reset")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    expect(kernel_status(page, "Idle")).to_be_visible(timeout=90_000)


def kernel_status(page, state: str):
    return page.locator(".jp-StatusBar-Widget, .jp-StatusBar-TextItem", has_text=f"| {state}").first


def run_all(page) -> None:
    """Run > Run All Cells."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def select_matching(select, pattern: str) -> str:
    """Choose the first option of ``select`` whose text matches ``pattern`` (ipywidgets writes
    option text with no-break spaces); return that text."""
    select.scroll_into_view_if_needed()
    texts = [t.replace("\xa0", " ") for t in select.locator("option").all_text_contents()]
    for index, text in enumerate(texts):
        if re.search(pattern, text):
            select.select_option(index=index)
            return text
    raise AssertionError(f"no option matches {pattern!r}: {texts}")


def shut_down_kernels(base: str, token: str) -> None:
    """Stop every kernel of the server (a test's notebook should not slow the next one down)."""
    import urllib.request

    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as r:
        sessions = json.loads(r.read())
    for session in sessions:
        request = urllib.request.Request(f"{base}/api/sessions/{session['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(request, timeout=30).close()
