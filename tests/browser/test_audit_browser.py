"""The audit page in a real browser, against a demo of its own: an operator's cancel
(``everystep_cancel``, run in the demo's database) and 55 more entries, so the trail has
two pages of 50. The demo's UI is public, but the audit page names people and stays for
signed-in staff: the test signs in first, after seeing the anonymous visitor sent to the
login."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import BrowserPage, axe_violations, demo_python, save_screenshot

MORE = 55
USER, PASSWORD = "auditor", "audit-trail-1"


@pytest.fixture(scope="module")
def cancelled(demo_url: str, demo_data: Path) -> str:
    """A blocked run (the demo's worker leaves it alone) cancelled by the command, then
    ``MORE`` entries written by a user whose name and reason hold markup; the run's id."""
    return demo_python(
        demo_data,
        "from django.core.management import call_command\n"
        "from everystep.models import Workflow\n"
        "from everystep.store import audit\n"
        "from django.contrib.auth.models import User\n"
        f"User.objects.create_superuser({USER!r}, '', {PASSWORD!r})\n"
        "run = Workflow.objects.create(name='demo.audit', status='blocked', args=[])\n"
        "call_command('everystep_cancel', str(run.id), stdout=open('/dev/null', 'w'))\n"
        "actor = audit.Actor('<b>ops</b>', 'ui')\n"
        f"for n in range({MORE}):\n"
        "    audit.record('requeue_runner', actor, run_ids=[run.id], reason=f'<i>{n}</i>')\n"
        "print(run.id)\n",
    ).strip()


def expect() -> Any:
    return pytest.importorskip("playwright.sync_api").expect


def test_the_audit_page_lists_the_cancel_and_passes_axe(
    ui: BrowserPage, axe_source: str, cancelled: str
) -> None:
    """Reached from the header; newest first, markup shown as text, the cancel on the
    second page linking its run; no axe-core violation on either page."""
    page = ui.page
    page.goto(ui.url("/"))
    with page.expect_navigation():
        page.locator("header.es-header nav a", has_text="Audit").click()
    # Anonymous in a public UI: the trail is not shown, the login is (issue 39).
    expect()(page.get_by_label("Username")).to_be_visible()
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill(PASSWORD)
    with page.expect_navigation():
        page.get_by_label("Password").press("Enter")
    expect()(page).to_have_title("Audit · everystep")
    rows = page.locator("table.es-table > tbody > tr")
    expect()(rows).to_have_count(50)
    expect()(rows.first.locator("td").nth(4)).to_have_text(f"<i>{MORE - 1}</i>")
    expect()(rows.first.locator("td").nth(1)).to_contain_text("<b>ops</b>")
    assert axe_violations(page, axe_source) == []
    save_screenshot(ui, "audit-first-page.png")

    with page.expect_navigation():
        page.get_by_role("link", name="Older →").click()
    last = rows.last
    expect()(last.locator("td").nth(2)).to_have_text("cancel")
    expect()(last.locator("td").nth(1)).to_contain_text("everystep_cancel")
    with page.expect_navigation():
        last.locator("a.es-id").click()
    assert cancelled in page.url
    page.go_back()
    assert axe_violations(page, axe_source) == []
    ui.assert_no_console_errors()
