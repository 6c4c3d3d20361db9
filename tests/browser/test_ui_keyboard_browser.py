"""The UI from the keyboard, signed in as a user who may act: a demo of its own (the
module's) with a superuser, a run waiting for an event and a blocked run, so the run
pages show every action form. Tab reaches every control with a visible focus, the forms
pass the axe-core rules, and an event is sent without touching the mouse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import BrowserPage, axe_violations, demo_python, save_screenshot

USER, PASSWORD = "oncall", "keyboard-only-1"

SEED = f"""
from datetime import timedelta
from django.contrib.auth.models import User
from django.utils import timezone
from everystep.models import Step, Workflow
User.objects.create_superuser({USER!r}, "", {PASSWORD!r})
now = timezone.now()
# Not due for a day: the demo's worker leaves both alone.
waiting = Workflow.objects.create(
    name="demo.approval", status="scheduled", args=[1], due_at=now + timedelta(days=1),
    waiting_for="approval",
)
blocked = Workflow.objects.create(name="demo.payment", status="blocked", args=[2])
Step.objects.create(
    workflow=blocked, step_id="2", name="demo.charge", args=[2], status="started",
    started_at=now,
)
print(waiting.id, blocked.id)
"""

# The focused element after a Tab, numbered on its first visit: the walk ends when the
# first one comes round again (a date field takes several Tabs, one per part).
FOCUSED = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const seen = el.dataset.esWalk !== undefined;
  if (!seen) el.dataset.esWalk = String(document.querySelectorAll("[data-es-walk]").length);
  const style = getComputedStyle(el);
  return {seen, first: el.dataset.esWalk === "0", html: el.outerHTML.slice(0, 120),
          outline: style.outlineStyle, width: parseFloat(style.outlineWidth)};
}"""

# Controls a keyboard user must be able to reach that the walk did not (an unchecked radio
# is reached with the arrow keys inside its group, not with Tab).
MISSED = """() => [...document.querySelectorAll(
    'a[href], button, input:not([type=hidden]), select, textarea, summary')]
  .filter(el => el.getClientRects().length > 0 && !el.disabled)
  .filter(el => !(el.type === 'radio' && !el.checked))
  .filter(el => el.dataset.esWalk === undefined)
  .map(el => el.outerHTML.slice(0, 120))"""


def expect() -> Any:
    return pytest.importorskip("playwright.sync_api").expect


@pytest.fixture(scope="module")
def seeded(demo_url: str, demo_data: Path) -> tuple[str, str]:
    """The superuser and the two runs; (waiting run id, blocked run id)."""
    waiting, blocked = demo_python(demo_data, SEED).strip().splitlines()[-1].split()
    return waiting, blocked


@pytest.fixture
def signed_in(ui: BrowserPage, seeded: tuple[str, str]) -> BrowserPage:
    page = ui.page
    page.goto(ui.url("/admin/login/?next=/"))
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill(PASSWORD)
    with page.expect_navigation():
        page.get_by_label("Password").press("Enter")
    expect()(page.locator(".es-user")).to_contain_text(USER)
    return ui


def tab_through(ui: BrowserPage, limit: int = 600) -> list[dict[str, Any]]:
    """Press Tab until the focus comes back to the first control; the controls it
    visited, in order."""
    visited: list[dict[str, Any]] = []
    outside = 0
    for _ in range(limit):
        ui.page.keyboard.press("Tab")
        focused = ui.page.evaluate(FOCUSED)
        if focused is None:  # past the last control, before the first again
            outside += 1
            if outside > 2:
                break
            continue
        if focused["first"] and visited:
            break
        if not focused["seen"]:
            visited.append(focused)
    return visited


def assert_every_control_reached_with_a_visible_focus(ui: BrowserPage) -> list[dict[str, Any]]:
    visited = tab_through(ui)
    assert visited, "Tab reached nothing"
    assert ui.page.evaluate(MISSED) == []
    faint = [v["html"] for v in visited if v["outline"] == "none" or v["width"] < 2]
    assert faint == [], "focused without a visible outline"
    return visited


@pytest.mark.parametrize("where", ["runs", "waiting", "blocked", "runners"])
def test_tab_reaches_every_control_with_a_visible_focus(
    signed_in: BrowserPage, seeded: tuple[str, str], axe_source: str, where: str
) -> None:
    """Every link, button and field of the page, the action forms included, is reached
    by Tab and shows where the focus is; the page passes the axe-core rules."""
    ui, (waiting, blocked) = signed_in, seeded
    path = {
        "runs": "/",
        "waiting": f"/runs/{waiting}/",
        "blocked": f"/runs/{blocked}/",
        "runners": "/runners/",
    }[where]
    ui.page.goto(ui.url(path))
    if where in {"waiting", "blocked"}:
        expect()(ui.page.get_by_role("heading", name="Actions")).to_be_visible()
        save_screenshot(ui, f"actions-{where}-run.png")
    assert_every_control_reached_with_a_visible_focus(ui)
    assert axe_violations(ui.page, axe_source) == []
    ui.assert_no_console_errors()


def tab_to(ui: BrowserPage, focused: str, what: str, limit: int = 200) -> None:
    """Press Tab until the JavaScript test ``focused`` holds."""
    for _ in range(limit):
        ui.page.keyboard.press("Tab")
        if ui.page.evaluate(f"() => {focused}"):
            return
    pytest.fail(f"Tab never reached {what}")


def test_an_event_is_sent_from_the_keyboard(
    signed_in: BrowserPage, seeded: tuple[str, str]
) -> None:
    """Tab to the event's name, type it, Tab to "Send event", press Enter: it is sent."""
    ui, (waiting, _blocked) = signed_in, seeded
    page = ui.page
    page.goto(ui.url(f"/runs/{waiting}/"))
    tab_to(ui, "document.activeElement.name === 'name'", "the event name field")
    page.keyboard.type("approval")
    tab_to(ui, "document.activeElement.innerText === 'Send event'", "the Send event button")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect()(page.locator(".es-notice")).to_contain_text("Done: event sent.")
    ui.assert_no_console_errors()
