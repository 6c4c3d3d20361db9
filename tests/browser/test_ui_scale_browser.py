"""The UI with more rows than a person can read, in a real browser: a demo of its own (the
module's) with 10,500 finished runs added, past the point where the status counts stop,
and one run of 2,000 steps with a 50-branch fork. The screenshots it saves are the
pictures of the list at scale and of the big run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import BrowserPage, axe_violations, demo_python, save_screenshot

# More than the counts' cap (10,000) of completed runs, a few hundred failed ones.
COMPLETED = 10_200
FAILED = 300

MANY_RUNS = f"""
from everystep.models import Workflow
rows = [Workflow(name="demo.bulk", status="completed", args=[n]) for n in range({COMPLETED})]
rows += [Workflow(name="demo.bulk", status="failed", args=[n]) for n in range({FAILED})]
Workflow.objects.bulk_create(rows, batch_size=2000)
"""

# 400 steps, a fork of 50 branches of 30 steps at 401 (one failed), 100 more: 2,000 in all.
BIG_RUN = """
from datetime import timedelta
from django.utils import timezone
from everystep.models import Step, Workflow
ids = [str(n) for n in range(1, 401)]
ids += [f"401.{b}.{s}" for b in range(50) for s in range(1, 31)]
ids += [str(n) for n in range(402, 502)]
start = timezone.now() - timedelta(hours=1)
run = Workflow.objects.create(
    name="demo.big", status="failed", args=[1], completed_at=start + timedelta(seconds=30)
)
Step.objects.bulk_create(
    Step(
        workflow=run, step_id=sid, name=f"demo.step_{n % 7}", args=[n],
        status="failed" if sid == "401.17.30" else "done", result={"n": n},
        started_at=start + timedelta(milliseconds=10 * n),
        finished_at=start + timedelta(milliseconds=10 * n + 5),
    )
    for n, sid in enumerate(ids)
)
print(run.id)
"""


def expect() -> Any:
    return pytest.importorskip("playwright.sync_api").expect


@pytest.fixture(scope="module")
def big_data(demo_url: str, demo_data: Path) -> str:
    """The many runs and the big run in the demo's database; the big run's id."""
    demo_python(demo_data, MANY_RUNS)
    return demo_python(demo_data, BIG_RUN).strip().splitlines()[-1]


def test_the_list_at_scale_labels_capped_counts(
    ui: BrowserPage, big_data: str, axe_source: str
) -> None:
    """Past 10,000 a status count reads "10,000+"; the page says where counts stop."""
    page = ui.page
    page.goto(ui.url("/"))
    expect()(page.locator('.es-count[data-status="completed"]')).to_have_text("10,000+")
    # Under the cap a count is exact: these, the big run, and the demo's failing sync once
    # its worker has given up on it.
    failed = page.locator('.es-count[data-status="failed"]').inner_text()
    assert failed in {str(FAILED + 1), str(FAILED + 2)}, failed
    expect()(page.get_by_text("Counts stop at 10,000.")).to_be_visible()
    expect()(page.locator("a.es-id")).to_have_count(200)
    expect()(page.get_by_role("link", name="Older →")).to_have_count(1)
    assert axe_violations(page, axe_source) == []
    save_screenshot(ui, "runs-at-scale.png")
    ui.assert_no_console_errors()


def test_a_run_of_2000_steps_renders_readably(
    ui: BrowserPage, big_data: str, axe_source: str
) -> None:
    """The big run's page: the step table in pages, the fork collapsed around its failed
    branch, the failed step reachable from the graph, the timeline kept to a page."""
    page = ui.page
    page.goto(ui.url(f"/runs/{big_data}/"))
    expect()(page.locator("tr[id^='step-']")).to_have_count(100)
    expect()(page.get_by_role("link", name="Show all 2000 steps").first).to_be_visible()
    assert page.get_by_text("branches not shown").count() >= 1
    failed = page.locator("a.es-node.es-failed")
    assert failed.count() >= 1
    assert failed.first.get_attribute("href").endswith("#step-401.17.30")
    lanes = page.locator("div.es-timeline .es-lane")
    assert 0 < lanes.count() <= 100
    assert axe_violations(page, axe_source) == []
    save_screenshot(ui, "big-run.png")
    ui.assert_no_console_errors()
