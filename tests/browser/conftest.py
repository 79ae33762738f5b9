"""The console in a real browser: Debian's chromium, driven by Playwright, against a real local stack.

The stack is started as the e2e tests start it (tests/e2e/conftest.py: `jobsched local` in a
subprocess on free loopback ports, stopped with Ctrl-C). Playwright's own browser download cannot
work here, so the browser is Debian's `chromium` (`apt-get install chromium`; .ci/run installs it).
Without it the tests skip on a developer's machine and FAIL when CI is set: CI must never go green
by not running them.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.chromium import chromium_path
from tests.e2e.conftest import Stack, start_stack, stop_stack

VENDOR = Path(__file__).resolve().parent / "vendor"
# The pages' screenshots: docs/console/ (the README shows them) when JOBSCHED_SCREENSHOTS=docs, so
# that `make test` leaves the committed ones alone; otherwise a folder under the system's temp dir.
SCREENSHOTS = (
    Path(__file__).resolve().parents[2] / "docs" / "console"
    if os.environ.get("JOBSCHED_SCREENSHOTS") == "docs"
    else Path(tempfile.gettempdir()) / "jobsched-console-screenshots"
)
TENANT = "console-e2e"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="package")
def console_stack() -> Iterator[Stack]:
    """One local stack for the browser tests, ticking every 2 s so scheduled work shows up quickly."""
    running = start_stack(JOBSCHED_TICK_SECONDS="2")
    try:
        yield running
    finally:
        stop_stack(running)


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """A headless chromium for the package (Playwright's sync API)."""
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: the tests run as root here (CI too), where chromium's sandbox refuses to start.
        launched = playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any, console_stack: Stack) -> Iterator[Any]:
    """A fresh 1280x800 page whose console talks as TENANT (the header field's stored value)."""
    context = browser.new_context(viewport=DESKTOP, base_url=console_stack.url)
    context.add_init_script(f"localStorage.setItem('jobsched.tenant', {TENANT!r});")
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()


def create(stack: Stack, body: dict[str, Any]) -> str:
    """Create a job through the API as TENANT; its id."""
    answer = stack.post("/api/jobs", body, **{"X-Tenant": TENANT, "Idempotency-Key": str(uuid.uuid4())})
    assert answer.status_code == 201, answer.text
    job_id: str = answer.json()["job_id"]
    return job_id


def open_console(page: Any, route: str) -> None:
    """Go to a console route and wait until its page has rendered (main[data-ready=true])."""
    from playwright.sync_api import expect

    if page.url.endswith(f"/console/{route}"):
        page.reload()  # the same URL again: goto would keep the page as it was drawn
    else:
        page.goto(f"/console/{route}")
    # A new hash on the same document re-renders without a load: wait for this route's render.
    main = page.locator("main#main")
    expect(main).to_have_attribute("data-route", route, timeout=15_000)
    expect(main).to_have_attribute("data-ready", "true", timeout=15_000)
