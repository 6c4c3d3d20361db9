"""Bulk cancel from the runs page in a real browser, signed in as a user who may act: a
demo of its own (the module's) with a superuser and a dozen runs of one workflow that
are not due for a day. The list is filtered through its form, the bulk action chosen,
the confirm page shows the count (and passes the axe-core rules), the confirmation
cancels the runs and the list says how many."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import BrowserPage, axe_violations, demo_python, save_screenshot

USER, PASSWORD = "bulkop", "bulk-cancel-1"
WORKFLOW = "demo.bulk_target"
RUNS = 12

SEED = f"""
from datetime import timedelta
from django.contrib.auth.models import User
from django.utils import timezone
from everystep.models import Workflow
User.objects.create_superuser({USER!r}, "", {PASSWORD!r})
later = timezone.now() + timedelta(days=1)
# Not due for a day: the demo's worker leaves them alone.
Workflow.objects.bulk_create(
    [Workflow(name={WORKFLOW!r}, args=[i], due_at=later) for i in range({RUNS})]
)
"""

STATUSES = f"""
from everystep.models import Workflow
print(sorted(set(Workflow.objects.filter(name={WORKFLOW!r}).values_list("status", flat=True))))
"""


def expect() -> Any:
    return pytest.importorskip("playwright.sync_api").expect


@pytest.fixture(scope="module")
def seeded(demo_url: str, demo_data: Path) -> None:
    demo_python(demo_data, SEED)


@pytest.fixture
def signed_in(ui: BrowserPage, seeded: None) -> BrowserPage:
    page = ui.page
    page.goto(ui.url("/admin/login/?next=/"))
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill(PASSWORD)
    with page.expect_navigation():
        page.get_by_label("Password").press("Enter")
    expect()(page.locator(".es-user")).to_contain_text(USER)
    return ui


def test_bulk_cancel_from_a_filtered_runs_list(
    signed_in: BrowserPage, demo_data: Path, axe_source: str
) -> None:
    """Filter by workflow, choose the bulk cancel, see the count, confirm: the list says
    how many runs were cancelled, and they are."""
    ui = signed_in
    page = ui.page
    page.goto(ui.url("/"))
    expect()(page.get_by_role("link", name="Cancel the runs matching this filter")).to_have_count(0)
    page.locator("input[name=workflow]").fill(WORKFLOW)
    with page.expect_navigation():
        page.locator("form.es-filters button[type=submit]").click()
    expect()(page.locator("table.es-table > tbody > tr")).to_have_count(RUNS)

    with page.expect_navigation():
        page.get_by_role("link", name="Cancel the runs matching this filter").click()
    expect()(page.get_by_role("heading", level=1)).to_have_text("Cancel the runs matching a filter")
    expect()(page.locator(".es-bulk-count")).to_contain_text(f"Cancel {RUNS} runs?")
    expect()(page.locator(".es-bulk-filter")).to_contain_text(f"workflow = {WORKFLOW}")
    save_screenshot(ui, "bulk-cancel-confirm.png")
    assert axe_violations(page, axe_source) == []
    assert demo_python(demo_data, STATUSES).strip() == "['scheduled']"

    with page.expect_navigation():
        page.get_by_role("button", name=f"Cancel {RUNS} runs").click()
    expect()(page.locator(".es-notice")).to_contain_text(f"Cancelled {RUNS} runs.")
    badges = page.locator("table.es-table > tbody > tr td .es-badge")
    expect()(badges).to_have_count(RUNS)
    assert set(badges.all_inner_texts()) == {"cancelled"}
    assert demo_python(demo_data, STATUSES).strip() == "['cancelled']"
    ui.assert_no_console_errors()
