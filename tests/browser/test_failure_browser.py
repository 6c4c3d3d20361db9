"""A failed run's page in a real browser, against the runner's ``demo`` role: its
traceback is open, its stored error JSON and its failed step's traceback are collapsed
until asked for, and the page passes axe-core. The demo's ``demo.sync_catalogue`` of five
pages fails on page 3."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests.browser.conftest import BrowserPage, axe_violations, save_screenshot

OUTCOME_TIMEOUT = 90.0  # the failing sync finishes within seconds
FAILED_SYNC = ("demo.sync_catalogue", "failed")


def expect() -> Any:
    return pytest.importorskip("playwright.sync_api").expect


def failed_sync(ui: BrowserPage) -> Any:
    return (
        ui.page.locator("table.es-table > tbody > tr")
        .filter(has=ui.page.locator("td .es-badge.es-failed"))
        .filter(has=ui.page.locator("td", has_text=re.compile(r"^demo\.sync_catalogue$")))
    )


def open_failed_run(ui: BrowserPage) -> None:
    """Open the runs page, reload it until the failing sync has failed (bounded), and
    follow its link."""
    ui.page.goto(ui.url("/"))
    deadline = time.monotonic() + OUTCOME_TIMEOUT
    while failed_sync(ui).count() != 1:
        if time.monotonic() > deadline:
            pytest.fail(f"no failed {FAILED_SYNC[0]} after {OUTCOME_TIMEOUT:.0f}s")
        time.sleep(0.5)
        ui.page.reload()
    with ui.page.expect_navigation():
        failed_sync(ui).locator("a.es-id").click()


def test_failed_run_shows_its_traceback_open_and_its_json_folded(ui: BrowserPage) -> None:
    """The run's traceback is open under its error, with the user's raising frame; the
    error's stored JSON is closed until asked for; the failed step's row has its own
    traceback, closed."""
    page = ui.page
    open_failed_run(ui)
    expect()(page.locator("h1 .es-badge.es-failed")).to_have_text("failed")
    expect()(page.locator("p.es-error").first).to_contain_text("upstream timed out on page 3")

    fields = page.locator("h2:has-text('Error') ~ details.es-error-fields").first
    expect()(fields.locator("summary")).to_have_text("Stored error (JSON)")
    expect()(fields.locator("pre.es-json")).to_be_hidden()
    fields.locator("summary").click()
    expect()(fields.locator("pre.es-json")).to_be_visible()
    expect()(fields.locator("pre.es-json")).to_contain_text("upstream timed out on page 3")

    run_trace = page.locator("h2:has-text('Error') ~ details.es-traceback").first
    expect()(run_trace.locator("summary")).to_have_text("Traceback")
    expect()(run_trace.locator("pre.es-trace")).to_be_visible()
    expect()(run_trace.locator("pre.es-trace")).to_contain_text(
        "Traceback (most recent call last):"
    )
    expect()(run_trace.locator("pre.es-trace")).to_contain_text("in fetch_page")
    expect()(run_trace.locator("pre.es-trace")).to_contain_text(
        "ConnectionError: upstream timed out on page 3"
    )

    step_row = page.locator("table.es-table > tbody > tr").filter(
        has=page.locator(".es-badge.es-failed")
    )
    expect()(step_row).to_have_count(1)
    step_trace = step_row.locator("details.es-traceback")
    expect()(step_trace.locator("pre.es-trace")).to_be_hidden()
    step_trace.locator("summary").click()
    expect()(step_trace.locator("pre.es-trace")).to_be_visible()
    expect()(step_trace.locator("pre.es-trace")).to_contain_text('raise ConnectionError("upstream')

    save_screenshot(ui, "failed-run-traceback.png")
    ui.assert_no_console_errors()


def test_failed_run_page_passes_the_axe_core_rules(ui: BrowserPage, axe_source: str) -> None:
    """axe-core finds no violation on a failed run's page, its tracebacks and stored error
    open or shut; no rule is disabled."""
    page = ui.page
    open_failed_run(ui)
    assert axe_violations(page, axe_source) == []
    for summary in page.locator(
        "details.es-traceback > summary, details.es-error-fields > summary"
    ).all():
        summary.click()
    assert axe_violations(page, axe_source) == []
    ui.assert_no_console_errors()
