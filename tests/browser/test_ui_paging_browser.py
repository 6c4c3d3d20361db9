"""Paging through the runs list in a real browser: a demo of its own (the module's), with
450 finished runs added to its database, so the list has three pages of 200."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import BrowserPage, axe_violations, demo_python, save_screenshot

ADDED = 450
DEMO_RUNS = 6


@pytest.fixture(scope="module")
def many_runs(demo_url: str, demo_data: Path) -> int:
    """The demo's six runs and 450 more (finished, so its worker leaves them alone)."""
    demo_python(
        demo_data,
        "from everystep.models import Workflow\n"
        f"Workflow.objects.bulk_create(Workflow(name='demo.bulk', status='completed', "
        f"args=[n]) for n in range({ADDED}))\n",
    )
    return DEMO_RUNS + ADDED


def expect() -> Any:
    return pytest.importorskip("playwright.sync_api").expect


def listed(ui: BrowserPage) -> list[str]:
    return [text.strip() for text in ui.page.locator("a.es-id").all_inner_texts()]


def follow(ui: BrowserPage, name: str) -> None:
    with ui.page.expect_navigation():
        ui.page.get_by_role("link", name=name).click()


def test_older_and_newer_walk_the_list(ui: BrowserPage, many_runs: int) -> None:
    page = ui.page
    page.goto(ui.url("/"))
    save_screenshot(ui, "runs-first-page.png")
    first = listed(ui)
    assert len(first) == 200 and first == sorted(first, reverse=True)
    expect()(page.get_by_role("link", name="← Newer")).to_have_count(0)

    follow(ui, "Older →")
    second = listed(ui)
    assert len(second) == 200 and max(second) < min(first)
    follow(ui, "Older →")
    third = listed(ui)
    assert len(third) == many_runs - 400 and max(third) < min(second)
    expect()(page.get_by_role("link", name="Older →")).to_have_count(0)
    assert len(set(first + second + third)) == many_runs
    save_screenshot(ui, "runs-last-page.png")

    follow(ui, "← Newer")
    assert listed(ui) == second
    # The links are reachable from the keyboard: focus "Newest" and press Enter.
    page.get_by_role("link", name="Newest").focus()
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert listed(ui) == first
    ui.assert_no_console_errors()


def test_filters_survive_paging(ui: BrowserPage, many_runs: int) -> None:
    page = ui.page
    page.goto(ui.url("/"))
    page.get_by_label("Workflow").fill("demo.bulk")
    page.locator("select[name=status]").select_option("completed")
    with page.expect_navigation():
        page.get_by_role("button", name="Apply").click()
    follow(ui, "Older →")
    follow(ui, "Older →")
    expect()(page.get_by_label("Workflow")).to_have_value("demo.bulk")
    expect()(page.locator("select[name=status]")).to_have_value("completed")
    assert len(listed(ui)) == ADDED - 400
    names = page.locator("table.es-table > tbody > tr > td:nth-child(2)").all_inner_texts()
    assert set(names) == {"demo.bulk"}
    ui.assert_no_console_errors()


def test_a_full_page_passes_the_axe_core_rules(
    ui: BrowserPage, many_runs: int, axe_source: str
) -> None:
    """axe-core on a page with 200 rows and both paging links."""
    ui.page.goto(ui.url("/"))
    follow(ui, "Older →")
    assert axe_violations(ui.page, axe_source) == []
