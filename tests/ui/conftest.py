"""Fixtures of the browser tests: the served story (tests/ui/story.py), headless Chromium, pages,
and screenshots.

Chromium is Debian's (`make browser`); Python Playwright drives it by `executable_path`, since
`playwright install` cannot work offline. Screenshots go to `--screenshots DIR` (`make
screenshots` passes docs/img; the option is declared in tests/conftest.py) or to a temporary
directory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    ViewportSize,
    expect,
    sync_playwright,
)

from tests.ui.story import Story, serve_story

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = ViewportSize(width=1440, height=1000)
TIMEOUT_MS = 30_000  # for one page to show what a test waits for
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    with serve_story(tmp_path_factory.mktemp("ui")) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (Debian's chromium package)")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport=VIEWPORT)
    ctx.set_default_timeout(TIMEOUT_MS)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


@pytest.fixture(scope="session")
def screenshot_dir(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    given = request.config.getoption("screenshots", default=None)
    if not given:
        return tmp_path_factory.mktemp("screenshots")
    path = Path(request.config.invocation_params.dir, given)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def shot(screenshot_dir: Path) -> Callable[[Page, str], Path]:
    """Save a full-page screenshot of `page` as DIR/NAME.png (dialogs shown fully faded in)."""

    def save(page: Page, name: str) -> Path:
        path = screenshot_dir / f"{name}.png"
        page.screenshot(path=str(path), full_page=True, animations="disabled")
        return path

    return save
