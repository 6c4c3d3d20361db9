"""The everystep UI in a real browser, against the runner's ``demo`` role.

The demo schedules six runs: three ``demo.place_order`` (one stopped by ``Terminal`` on its
fraud check), two ``demo.sync_catalogue`` (one fails on page 3) and a slow
``demo.nightly_report``; its worker is ``demo-worker``. Everything is driven through the
page itself: links are clicked, the filter form is filled in and submitted.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests.browser.conftest import BrowserPage, axe_violations, save_screenshot

WORKFLOWS = ("demo.place_order", "demo.sync_catalogue", "demo.nightly_report")
# (workflow, status) -> runs: the three orders, one stopped on fraud; the two syncs, one failing.
OUTCOMES = {
    ("demo.place_order", "completed"): 2,
    ("demo.place_order", "stopped"): 1,
    ("demo.sync_catalogue", "completed"): 1,
    ("demo.sync_catalogue", "failed"): 1,
}
OUTCOME_TIMEOUT = 90.0  # the failing sync and the stopped order finish within seconds
# The completed order: position 1, the named fraud check at 2, the charge at 3, then the
# "notify" fork at 4 with one step in each of its two branches.
ORDER_STEPS = {
    "1": "reserve_stock",
    "fraud": "check_fraud",
    "3": "charge_card",
    "notify.0.1": "send_email",
    "notify.1.1": "update_crm",
}


def expect() -> Any:
    return pytest.importorskip("playwright.sync_api").expect


def rows(ui: BrowserPage) -> Any:
    return ui.page.locator("table.es-table > tbody > tr")


def rows_with(ui: BrowserPage, workflow: str, status: str) -> Any:
    return (
        rows(ui)
        .filter(has=ui.page.locator(f"td .es-badge.es-{status}"))
        .filter(has=ui.page.locator("td", has_text=re.compile(rf"^{re.escape(workflow)}$")))
    )


def open_runs_with_outcomes(ui: BrowserPage) -> None:
    """Open the runs page and reload it until the orders and the catalogue syncs have all
    reached their outcomes (bounded); the slow report may still be going."""
    ui.page.goto(ui.url("/"))
    deadline = time.monotonic() + OUTCOME_TIMEOUT
    while True:
        missing = {
            outcome: count
            for outcome, count in OUTCOMES.items()
            if rows_with(ui, *outcome).count() != count
        }
        if not missing:
            return
        if time.monotonic() > deadline:
            listed = "\n".join(rows(ui).all_inner_texts())
            pytest.fail(f"still waiting for {missing} after {OUTCOME_TIMEOUT:.0f}s:\n{listed}")
        time.sleep(0.5)
        ui.page.reload()


def apply_filters(ui: BrowserPage) -> None:
    with ui.page.expect_navigation():
        ui.page.locator("form.es-filters button[type=submit]").click()


def row_statuses(ui: BrowserPage) -> list[str]:
    return [text.strip() for text in rows(ui).locator("td:nth-child(3)").all_inner_texts()]


def row_workflows(ui: BrowserPage) -> list[str]:
    return [text.strip() for text in rows(ui).locator("td:nth-child(2)").all_inner_texts()]


def assert_stylesheet_applied(ui: BrowserPage) -> None:
    # ui.css paints the header dark and lays it out as a flex row: both are off without it.
    header = ui.page.locator("header.es-header")
    assert header.evaluate("el => getComputedStyle(el).display") == "flex"
    assert header.evaluate("el => getComputedStyle(el).backgroundColor") == "rgb(31, 35, 40)"


def test_runs_page_lists_the_demo_runs_and_filters_them(ui: BrowserPage) -> None:
    page = ui.page
    open_runs_with_outcomes(ui)
    expect()(page).to_have_title(re.compile(r"^Runs · everystep$"))
    assert_stylesheet_applied(ui)
    for workflow in WORKFLOWS:
        assert workflow in row_workflows(ui), row_workflows(ui)

    # The status filter, through the form: select "failed", Apply.
    page.locator("select[name=status]").select_option("failed")
    apply_filters(ui)
    assert re.search(r"[?&]status=failed(&|$)", page.url), page.url
    expect()(page.locator("select[name=status]")).to_have_value("failed")
    assert row_statuses(ui) == ["failed"]
    assert row_workflows(ui) == ["demo.sync_catalogue"]
    counts = page.locator("ul.es-counts")
    expect()(counts.locator("a[aria-current]")).to_have_count(1)
    expect()(counts.locator("a[aria-current] .es-count")).to_have_text("1")

    page.locator("select[name=status]").select_option("stopped")
    apply_filters(ui)
    assert row_statuses(ui) == ["stopped"]
    assert row_workflows(ui) == ["demo.place_order"]

    # Workflow and status together; then back to every status.
    page.locator("select[name=status]").select_option("completed")
    page.locator("input[name=workflow]").fill("demo.place_order")
    apply_filters(ui)
    assert row_statuses(ui) == ["completed", "completed"]
    assert set(row_workflows(ui)) == {"demo.place_order"}
    page.locator("select[name=status]").select_option("")
    apply_filters(ui)
    assert sorted(row_statuses(ui)) == ["completed", "completed", "stopped"]
    expect()(page.locator("input[name=workflow]")).to_have_value("demo.place_order")

    # The count links filter too, and the form follows them.
    page.locator("input[name=workflow]").fill("")
    apply_filters(ui)
    with page.expect_navigation():
        counts.locator("a", has=page.locator(".es-badge.es-stopped")).click()
    assert row_statuses(ui) == ["stopped"]
    expect()(page.locator("select[name=status]")).to_have_value("stopped")

    ui.assert_no_console_errors()


def test_auto_refresh_box_reloads_the_page(ui: BrowserPage) -> None:
    page = ui.page
    page.goto(ui.url("/"))
    expect()(page.locator("meta[http-equiv=refresh]")).to_have_count(0)
    page.locator("form.es-filters input[name=refresh]").check()
    apply_filters(ui)
    assert re.search(r"[?&]refresh=1(&|$)", page.url), page.url
    expect()(page.locator("form.es-filters input[name=refresh]")).to_be_checked()
    expect()(page.locator("meta[http-equiv=refresh]")).to_have_attribute("content", "5")
    # The browser reloads by itself within the advertised 5 s.
    with page.expect_navigation(timeout=20_000):
        pass
    expect()(page.locator("form.es-filters input[name=refresh]")).to_be_checked()
    ui.assert_no_console_errors()


def test_completed_order_page_shows_steps_graph_and_timeline(ui: BrowserPage) -> None:
    page = ui.page
    open_runs_with_outcomes(ui)
    order = rows_with(ui, "demo.place_order", "completed").first
    run_id = order.locator("a.es-id").inner_text().strip()
    with page.expect_navigation():
        order.locator("a.es-id").click()
    assert page.url.rstrip("/").endswith(f"/runs/{run_id}"), page.url
    expect()(page).to_have_title(f"Run {run_id} · everystep")
    assert_stylesheet_applied(ui)
    expect()(page.locator("h1")).to_contain_text("demo.place_order")
    expect()(page.locator("h1 .es-badge.es-completed")).to_have_text("completed")
    facts = page.locator("dl.es-facts")
    expect()(facts).to_contain_text(run_id)
    expect()(facts).to_contain_text("demo-worker")
    expect()(page.locator("pre.es-json").nth(1)).to_contain_text(f"charge-{run_id}")

    # Steps: one row per step, each done, with the function that ran.
    steps = page.locator("table.es-table > tbody > tr")
    expect()(steps).to_have_count(len(ORDER_STEPS))
    for step_id, function in ORDER_STEPS.items():
        row = page.locator(f'tr[id="step-{step_id}"]')
        expect()(row.locator("td").nth(0)).to_have_text(step_id)
        expect()(row.locator("td").nth(1)).to_contain_text(function)
        expect()(row.locator(".es-badge.es-done")).to_have_text("done")
    details = page.locator('tr[id="step-3"] details')
    details.locator("summary").click()
    expect()(details.locator("pre.es-json")).to_be_visible()
    expect()(details.locator("pre.es-json")).to_contain_text(f"charge-{run_id}")

    # The graph: three steps in sequence, then the "notify" fork with two branches.
    graph = page.locator("div.es-graph")
    top = graph.locator(":scope > ol.es-scope > li")
    expect()(top).to_have_count(4)
    fork = graph.locator("li.es-fork")
    expect()(fork).to_have_count(1)
    expect()(fork.locator(".es-fork-label")).to_have_text("fork notify")
    branches = fork.locator(".es-branch")
    expect()(branches).to_have_count(2)
    expect()(branches.locator(".es-branch-label")).to_have_text(["branch 0", "branch 1"])
    expect()(branches.nth(0).locator("a.es-node")).to_have_attribute("href", "#step-notify.0.1")
    expect()(branches.nth(1).locator("a.es-node")).to_have_attribute("href", "#step-notify.1.1")
    expect()(graph.locator("a.es-node.es-done")).to_have_count(len(ORDER_STEPS))
    for node in graph.locator("a.es-node").all():
        assert node.bounding_box()["width"] > 0
    # A graph node links to its step row, which is highlighted as the target.
    branches.nth(1).locator("a.es-node").click()
    expect()(page).to_have_url(re.compile(r"#step-notify\.1\.1$"))
    assert page.locator('tr[id="step-notify.1.1"]').evaluate("el => el.matches(':target')")

    # The timeline: one lane per step, a finished bar in each, inside its track.
    timeline = page.locator("div.es-timeline")
    lanes = timeline.locator(".es-lane")
    expect()(lanes).to_have_count(len(ORDER_STEPS))
    # Lanes follow start order: the two branches of the fork may start either way round.
    labels = [text.strip() for text in lanes.locator(".es-lane-label code").all_inner_texts()]
    assert labels[:3] == ["1", "fraud", "3"], labels
    assert sorted(labels[3:]) == ["notify.0.1", "notify.1.1"], labels
    expect()(timeline.locator(".es-bar.es-done")).to_have_count(len(ORDER_STEPS))
    expect()(timeline.locator(".es-bar.es-open")).to_have_count(0)
    for lane in lanes.all():
        track = lane.locator(".es-track").bounding_box()
        bar = lane.locator(".es-bar").bounding_box()
        assert track is not None and bar is not None
        assert bar["width"] >= 1 and bar["height"] > 0
        assert (
            track["x"] - 0.5 <= bar["x"]
            and bar["x"] + bar["width"] <= track["x"] + track["width"] + 0.5
        )

    save_screenshot(ui, "run.png")
    ui.assert_no_console_errors()


def test_runners_page_shows_the_demo_worker(ui: BrowserPage) -> None:
    page = ui.page
    page.goto(ui.url("/"))
    with page.expect_navigation():
        page.locator("header.es-header nav a", has_text="Runners").click()
    expect()(page).to_have_title("Runners · everystep")
    expect()(page.locator("header.es-header nav a[aria-current=page]")).to_have_text("Runners")
    assert_stylesheet_applied(ui)
    worker = page.locator("table.es-table > tbody > tr").filter(
        has=page.locator("td:first-child", has_text=re.compile(r"^demo-worker$"))
    )
    expect()(worker).to_have_count(1, timeout=30_000)
    expect()(worker.locator("td").nth(1)).to_have_text("4")  # the demo's pool
    expect()(worker.locator(".es-badge")).to_have_count(0)  # neither draining nor late
    # "Runs held" links to the runs this runner holds, through the runs page's filters.
    with page.expect_navigation():
        worker.locator("td").nth(3).locator("a").click()
    expect()(page.locator("select[name=status]")).to_have_value("running")
    expect()(page.locator("input[name=runner]")).to_have_value("demo-worker")
    ui.assert_no_console_errors()


def test_failed_sync_page_shows_its_error(ui: BrowserPage) -> None:
    page = ui.page
    open_runs_with_outcomes(ui)
    page.locator("select[name=status]").select_option("failed")
    apply_filters(ui)
    with page.expect_navigation():
        rows(ui).first.locator("a.es-id").click()
    expect()(page.locator("h1")).to_contain_text("demo.sync_catalogue")
    expect()(page.locator("h1 .es-badge.es-failed")).to_have_text("failed")
    expect()(page.locator("h2", has_text="Error")).to_have_count(1)
    # The run's error (the failed step's row shows it again under the step).
    error = page.locator("p.es-error").first
    expect()(error).to_contain_text("builtins.ConnectionError")
    expect()(error).to_contain_text("upstream timed out on page 3")
    # Every page of the fan-out ran; page 3 failed. The fork is "1", one branch per page.
    failed = page.locator('tr[id="step-1.3.page-3"] .es-badge.es-failed')
    expect()(failed).to_have_text("failed")
    expect()(page.locator("div.es-graph li.es-fork .es-branch")).to_have_count(5)
    expect()(page.locator("div.es-graph a.es-node.es-failed")).to_have_count(1)
    expect()(page.locator("div.es-timeline .es-bar.es-failed")).to_have_count(1)
    ui.assert_no_console_errors()


def search_from_top_bar(ui: BrowserPage, text: str) -> None:
    box = ui.page.get_by_role("searchbox", name="Find a run")
    box.fill(text)
    with ui.page.expect_navigation():
        box.press("Enter")


def test_pasting_a_run_id_into_the_top_bar_opens_the_run(ui: BrowserPage) -> None:
    page = ui.page
    open_runs_with_outcomes(ui)
    run_id = rows_with(ui, "demo.sync_catalogue", "failed").locator("a.es-id").inner_text()
    page.goto(ui.url("/runners/"))
    # Pasted from an alert: with blanks around it and in capitals.
    search_from_top_bar(ui, f"  {run_id.strip().upper()} ")
    assert page.url.rstrip("/").endswith(f"/runs/{run_id.strip()}"), page.url
    expect()(page.locator("h1")).to_contain_text("demo.sync_catalogue")
    save_screenshot(ui, "search-hit.png")

    # The six demo runs were scheduled within a second: they share their first 8 digits,
    # so that prefix lists them all; a prefix nobody has says so.
    search_from_top_bar(ui, run_id[:8])
    assert "/runs/" not in page.url, page.url
    expect()(rows(ui)).to_have_count(6)
    search_from_top_bar(ui, "not-an-order")
    expect()(page.locator(".es-notice")).to_contain_text("No run matches 'not-an-order'")
    expect()(rows(ui)).to_have_count(1)  # the "No runs." row
    save_screenshot(ui, "search-miss.png")
    ui.assert_no_console_errors()


@pytest.mark.parametrize("where", ["runs", "run", "runners"])
def test_pages_pass_the_axe_core_rules(ui: BrowserPage, axe_source: str, where: str) -> None:
    """axe-core finds no violation on the runs list, a run's page and the runners page;
    no rule is disabled."""
    page = ui.page
    open_runs_with_outcomes(ui)
    if where == "run":
        with page.expect_navigation():
            rows_with(ui, "demo.place_order", "completed").first.locator("a.es-id").click()
    elif where == "runners":
        page.goto(ui.url("/runners/"))
    assert axe_violations(page, axe_source) == []
    save_screenshot(ui, f"axe-{where}.png")
    ui.assert_no_console_errors()


def test_keyboard_reaches_the_search_box_with_a_visible_focus(ui: BrowserPage) -> None:
    page = ui.page
    page.goto(ui.url("/"))
    page.keyboard.press("Tab")
    expect()(page.locator(".es-skip")).to_be_focused()
    for _ in range(4):  # the brand, Runs, Runners, Audit
        page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    box = page.get_by_role("searchbox", name="Find a run")
    expect()(box).to_be_focused()
    assert box.evaluate("el => getComputedStyle(el).outlineStyle") == "solid"
    assert box.evaluate("el => parseFloat(getComputedStyle(el).outlineWidth)") >= 2


def test_the_axe_check_sees_violations(ui: BrowserPage, axe_source: str) -> None:
    """The check above can fail: an unlabelled field and faint text are found."""
    ui.page.set_content(
        '<!doctype html><html lang="en"><head><title>t</title></head><body><main>'
        '<h1>t</h1><input type="text" name="q"><p style="color:#bbb">failed</p>'
        "</main></body></html>"
    )
    found = axe_violations(ui.page, axe_source)
    assert any(line.startswith("label ") for line in found), found
    assert any(line.startswith("color-contrast ") for line in found), found
