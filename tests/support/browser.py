"""Headless Chromium for the console tests, driven by Playwright's Python API.

The browser is the distribution's ``chromium`` package (``apt-get install chromium``; ``.ci/run``
installs it): Playwright's own browser download needs the internet, which CI does not have.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = os.environ.get("MEMPROXY_CHROMIUM", "/usr/bin/chromium")
# Quiet, offline, container-friendly: no sandbox (CI runs as root), no GPU, no background
# fetches (updates, sync, safe-browsing lists) that would try the network.
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
]  # fmt: skip
# Screenshots land in docs/screenshots (the README shows them) only when asked for, so a
# routine test run does not rewrite tracked files; otherwise in the test's tmp dir.
SCREENSHOTS_ENV = "MEMPROXY_SCREENSHOTS"
REPO_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@contextmanager
def chromium() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: apt-get install -y chromium (see .ci/run)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def screenshot_dir(tmp: Path) -> Path:
    folder = REPO_SCREENSHOTS if os.environ.get(SCREENSHOTS_ENV) else tmp
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def watch_dialogs(page: Page) -> list[str]:
    """Record (and dismiss) every alert/confirm/prompt the page opens: an XSS would fire one."""
    fired: list[str] = []

    def on_dialog(dialog: object) -> None:
        fired.append(getattr(dialog, "message", "?"))
        dialog.dismiss()  # type: ignore[attr-defined]

    page.on("dialog", on_dialog)
    return fired
