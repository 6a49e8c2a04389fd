"""Helpers for the web page tests (SPEC §6.14): Debian's chromium driven by Playwright,
a sign-in through the real `stet ui`, and screenshots into docs/ui/ when asked.

Chromium is the system's (`apt-get install chromium`, see .ci/run): browsers cannot be
downloaded here. Set ``STET_UI_SCREENSHOTS=1`` to (re)write docs/ui/*.png from a test run.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Response, expect, sync_playwright

from tests.harness import DaemonProcess, run_stet

CHROMIUM = os.environ.get("STET_CHROMIUM", "/usr/bin/chromium")
SHOTS_DIR = Path(__file__).resolve().parents[2] / "docs" / "ui"
TIMEOUT_MS = 30_000  # a loaded machine: generous, and every wait is on an element or event
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (see .ci/run)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield b
        finally:
            b.close()


def new_page(browser: Browser, *, width: int = 1100, height: int = 900) -> tuple[BrowserContext, Page]:
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(TIMEOUT_MS)
    return context, context.new_page()


def login_url(daemon: DaemonProcess) -> str:
    """A one-time sign-in link, made by the real `stet ui` as a person would run it."""
    out = run_stet(daemon.home, "ui", "--json").stdout
    url: str = json.loads(out)["url"]
    assert url.startswith(daemon.api_url + "/ui/login?code=")
    return url


def signed_in(browser: Browser, daemon: DaemonProcess, *, width: int = 1100) -> tuple[BrowserContext, Page]:
    context, page = new_page(browser, width=width)
    assert status_of(page.goto(login_url(daemon))) == 200
    return context, page


def status_of(response: Response | None) -> int:
    assert response is not None, "no response"
    return response.status


def shot(page: Page, name: str) -> None:
    """A screenshot for docs/ui/ (only when STET_UI_SCREENSHOTS is set)."""
    if os.environ.get("STET_UI_SCREENSHOTS"):
        SHOTS_DIR.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS_DIR / f"{name}.png"), full_page=True)
