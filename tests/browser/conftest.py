"""Browser tests: JupyterLab 4 driven by Playwright with Debian's chromium (no download)."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "browser: drives a real JupyterLab in Debian's chromium (needs /usr/bin/chromium)")
