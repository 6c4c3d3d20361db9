"""The run page of a big run (2,000 steps, a fork of 50 branches): bounded statements,
the step table in pages, the graph collapsed, the timeline limited to the page."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from everystep.models import Status, Step, Workflow
from everystep.ui import graph, run_page
from tests.staff import staff_user

pytestmark = pytest.mark.django_db(transaction=True)

BRANCHES = 50
FAILED_STEP = "401.17.30"


def big_step_ids() -> list[str]:
    """400 steps, a fork of 50 branches of 30 steps at position 401, then 100 more."""
    ids = [str(n) for n in range(1, 401)]
    ids += [f"401.{b}.{s}" for b in range(BRANCHES) for s in range(1, 31)]
    return ids + [str(n) for n in range(402, 502)]


def make_run(step_ids: list[str], failed: str | None = None) -> Workflow:
    run = Workflow.objects.create(name="wf.big", status=Status.FAILED, args=[1])
    start = timezone.now() - timedelta(hours=1)
    Step.objects.bulk_create(
        Step(
            workflow=run,
            step_id=step_id,
            name=f"wf.step_{step_id}",
            args=[n],
            status="failed" if step_id == failed else "done",
            result={"n": n},
            started_at=start + timedelta(milliseconds=10 * n),
            finished_at=start + timedelta(milliseconds=10 * n + 5),
        )
        for n, step_id in enumerate(step_ids)
    )
    run.completed_at = start + timedelta(seconds=30)
    run.save(update_fields=["completed_at"])
    return run


@pytest.fixture
def staff(client: Any, django_user_model: Any) -> Any:
    client.force_login(staff_user(name="staff"))
    return client


@pytest.fixture
def big_run() -> Workflow:
    return make_run(big_step_ids(), failed=FAILED_STEP)


def get(client: Any, run: Workflow, **params: str) -> str:
    response = client.get(reverse("everystep:run", args=[run.id]), params)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def table_rows(html: str) -> list[str]:
    return re.findall(r'<tr id="step-([^"]+)">', html)


def statements(client: Any, run: Workflow, **params: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        get(client, run, **params)
    return [query["sql"] for query in captured.captured_queries]


def on_table(sqls: list[str], table: str) -> int:
    return sum(1 for sql in sqls if re.search(rf'FROM [`"]?{table}[`"]?\s', sql))


# --- statements ----------------------------------------------------------------------


def test_big_run_page_reads_the_run_once_and_its_steps_twice(staff, big_run):
    """The run page makes one statement for the run (and, the run being final, one for
    its forks) and two for its 2,000 steps."""
    sqls = statements(staff, big_run)
    assert on_table(sqls, "everystep_workflow") == 2
    assert on_table(sqls, "everystep_step") == 2


def test_statement_count_does_not_grow_with_steps(staff, big_run):
    """A run of 3 steps and one of 2,000 cost the same number of statements (no N+1)."""
    small = make_run(["1", "2.0.1", "2.1.1"])
    counted = len(statements(staff, small))
    assert len(statements(staff, big_run)) == counted
    assert len(statements(staff, big_run, steps="20", graph="all")) == counted


def test_all_steps_are_read_in_one_statement(staff, big_run):
    """With every step shown, one statement reads them all, for the table and the graph."""
    sqls = statements(staff, big_run, steps="all", graph="all")
    assert on_table(sqls, "everystep_workflow") == 2  # the run and its forks
    assert on_table(sqls, "everystep_step") == 1


# --- the step table ------------------------------------------------------------------


def test_step_table_shows_one_page_with_links(staff, big_run):
    """The first page lists 100 steps in start order, says how many there are and links
    to the next page and to all steps."""
    html = get(staff, big_run)
    rows = table_rows(html)
    assert rows == [str(n) for n in range(1, 101)]
    assert "Steps 1 to 100 of 2000 (page 1 of 20)" in html
    assert 'href="?steps=2#steps" rel="next"' in html
    assert 'href="?steps=all#steps">Show all 2000 steps' in html
    assert 'rel="prev"' not in html


def test_step_times_are_written_as_elsewhere_in_the_ui(staff, big_run):
    """A step's start is a <time> element with its ISO value, shown to the second."""
    first = Step.objects.get(workflow=big_run, step_id="1").started_at
    # In the project's zone with its offset (a naive time, with USE_TZ = False, is local).
    first = timezone.localtime(timezone.make_aware(first) if timezone.is_naive(first) else first)
    html = get(staff, big_run)
    shown = f'<time datetime="{first.isoformat()}">{first:%Y-%m-%d %H:%M:%S}</time>'
    assert shown in html


def test_last_page_and_out_of_range_page(staff, big_run):
    """Page 20 holds the last 100 steps; a page past the end shows the last page."""
    last = table_rows(get(staff, big_run, steps="20"))
    assert last == [str(n) for n in range(402, 502)]
    assert table_rows(get(staff, big_run, steps="999")) == last


def test_show_all_lists_every_step(staff, big_run):
    """``?steps=all`` lists all 2,000 steps once each and offers the paged view back."""
    html = get(staff, big_run, steps="all")
    rows = table_rows(html)
    assert len(rows) == len(set(rows)) == 2000
    assert "Show them in pages" in html


def test_bad_page_parameter_is_a_notice(staff, big_run):
    """A steps parameter that is not a page number falls back to page 1 with a notice."""
    html = get(staff, big_run, steps="-3x")
    assert "The steps parameter is a page number or" in html
    assert table_rows(html)[0] == "1"


def test_small_run_has_no_page_links(staff):
    """A run of a few steps shows them all with no paging links."""
    html = get(staff, make_run(["1", "2", "3"]))
    assert table_rows(html) == ["1", "2", "3"]
    assert "Next page" not in html and "Show all" not in html
    assert "Show the whole graph" not in html


# --- the graph -----------------------------------------------------------------------


def graph_html(html: str) -> str:
    start = html.index('<div class="es-graph">')
    return html[start : html.index('<h2 id="timeline">')]


def test_wide_fork_is_collapsed_around_the_failed_branch(staff, big_run):
    """Of 50 branches the graph shows the first two, the failed one and the last two;
    the others are summed up with their step counts."""
    shown = graph_html(get(staff, big_run))
    branches = re.findall(r'es-branch-label">branch (\d+)<', shown)
    assert branches == ["0", "1", "17", "48", "49"]
    assert "… 15 branches not shown (450 steps: 450 done)" in shown
    assert "… 30 branches not shown (900 steps: 900 done)" in shown
    assert "wf.step_401.17.30" in shown


def test_long_sequence_is_collapsed(staff, big_run):
    """The 400 steps before the fork and the 100 after it are cut to their ends, with
    a summary in place of the rest."""
    shown = graph_html(get(staff, big_run))
    ends = graph.SCOPE_ENDS
    assert f"wf.step_{ends}<" in shown and f"wf.step_{ends + 1}<" not in shown
    assert "wf.step_400<" not in shown and "wf.step_501<" in shown
    assert f"… {400 - ends} steps not shown: {400 - ends} done<" in shown


def test_whole_graph_on_request(staff, big_run):
    """``?graph=all`` draws every branch and every step."""
    shown = graph_html(get(staff, big_run, graph="all"))
    assert len(re.findall(r'es-branch-label">branch \d+<', shown)) == BRANCHES
    assert len(re.findall(r'class="es-node ', shown)) == 2000
    assert "not shown" not in shown


def test_graph_links_a_step_on_another_page(staff, big_run):
    """A node whose row is on another page of the table links to that page."""
    shown = graph_html(get(staff, big_run))
    # The failed step is step 400 + 17 * 30 + 30 = 940 in start order: page 10.
    assert f'href="?steps=10#step-{FAILED_STEP}"' in shown
    assert 'href="#step-1"' in shown


def test_status_is_written_not_only_coloured(staff, big_run):
    """Each node carries its status as text for screen readers and a distinct mark."""
    shown = graph_html(get(staff, big_run))
    assert 'es-mark-failed" aria-hidden="true">✗</span><span class="es-sr">failed<' in shown
    assert '<span class="es-sr">done</span>' in shown


# --- the timeline --------------------------------------------------------------------


def test_timeline_holds_the_steps_of_the_page(staff, big_run):
    """The timeline has one lane per step of the table's page, not 2,000."""
    html = get(staff, big_run, steps="3")
    lane = r'class="es-lane" role="listitem">\s*<span class="es-lane-label">.*?<code>([^<]+)<'
    lanes = re.findall(lane, html, re.S)
    assert lanes == [str(n) for n in range(201, 301)]
    assert "Steps 201 to 300 of 2000 (the page of the table above)" in html


def test_timeline_is_capped_when_all_steps_are_shown(staff, big_run):
    """With every step in the table, the timeline still stops at its lane limit."""
    html = get(staff, big_run, steps="all")
    assert html.count('class="es-lane"') == run_page.TIMELINE_MAX


def test_timeline_keeps_the_run_time_axis(staff, big_run):
    """On a later page the bars start further right: the axis is the whole run's."""
    first = re.search(r'style="left: ([\d.]+)%', get(staff, big_run, steps="20"))
    assert first is not None and float(first.group(1)) > 90.0


# --- collapse, on its own ------------------------------------------------------------


def test_collapse_keeps_a_short_graph_whole():
    """Scopes and forks under the limits come out unchanged."""
    items = [("1", "done"), ("2.0.1", "done"), ("2.1.1", "failed")]
    nodes = graph.build_graph(items, lambda item: item[0])
    assert graph.collapse(nodes, lambda item: item[1]) == nodes


def test_collapse_sums_up_forks_in_a_gap():
    """A gap that hides a fork counts its entries and, apart, the steps inside them."""
    ids = [str(n) for n in range(1, 21)] + ["21.0.1", "21.1.1"]
    ids += [str(n) for n in range(22, 61)]
    nodes = graph.build_graph([(i, "done") for i in ids], lambda item: item[0])
    kept = graph.collapse(nodes, lambda item: item[1])
    gaps = [node for node in kept if isinstance(node, graph.Gap)]
    assert [(gap.what, gap.steps, gap.plain) for gap in gaps] == [("36 steps and forks", 37, False)]
    assert len(kept) == 2 * graph.SCOPE_ENDS + 1


def test_collapse_caps_the_remarkable_entries_it_keeps():
    """A sequence of hundreds of failed steps still shows a bounded number of them."""
    items = [(str(n), "failed") for n in range(1, 501)]
    nodes = graph.build_graph(items, lambda item: item[0])
    kept = graph.collapse(nodes, lambda item: item[1])
    steps = [node for node in kept if not isinstance(node, graph.Gap)]
    assert len(steps) == 2 * graph.SCOPE_ENDS + graph.NOTABLE_SHOWN
    assert sum(node.count for node in kept if isinstance(node, graph.Gap)) == 500 - len(steps)


def test_every_step_of_a_run_of_big_values_is_a_bounded_page(staff):
    """``?steps=all`` on 400 steps of 50 KB results each (20 MB of details): the page
    shows details up to ``DETAILS_SHOWN`` characters, then says where the rest is
    (issue 39: a big run's page made 78 MB)."""
    run = Workflow.objects.create(name="wf.big", status=Status.COMPLETED, args=[1])
    now = timezone.now()
    Step.objects.bulk_create(
        (
            Step(
                workflow=run,
                step_id=str(n),
                name="wf.step",
                status="done",
                result="r" * 50_000,
                started_at=now,
                finished_at=now,
            )
            for n in range(1, 401)
        ),
        batch_size=100,
    )
    html = staff.get(reverse("everystep:run", args=[run.id]) + "?steps=all").content.decode()
    assert len(html) < run_page.DETAILS_SHOWN + 1_000_000, len(html)
    assert html.count('<tr id="step-') == 400  # every row is listed
    assert "not shown: this page has shown 2,000,000 characters" in html


def test_bidi_controls_and_a_huge_message_are_shown_escaped_and_cut(staff):
    """A run whose error message holds U+202E and is 2,000,000 characters long, and a
    step's error and traceback holding bidi controls: the page shows each control
    escaped, so nothing reads in another order than it is, and the headline is cut as
    a step row's message is (issue 41)."""
    message = "invoice \u202egpj.exe" + "m" * 2_000_000
    error = {"type": "builtins.ValueError", "message": message, "args": None}
    step_error = {
        "type": "builtins.KeyError",
        "message": "step \u2066isolated\u2069",
        "args": None,
        "traceback": "Traceback:\n  line \u202dforced\n",
    }
    run = Workflow.objects.create(
        name="wf.big",
        status=Status.FAILED,
        args=["\u202eargs"],
        error=error,
        idempotency_key="key\u202e",
    )
    now = timezone.now()
    Step.objects.create(
        workflow=run,
        step_id="1",
        name="wf.step",
        status="failed",
        error=step_error,
        started_at=now,
        finished_at=now,
    )
    html = staff.get(reverse("everystep:run", args=[run.id])).content.decode()
    for control in ("\u202e", "\u2066", "\u2069", "\u202d"):
        assert control not in html, repr(control)
    assert "invoice \\u202egpj.exe" in html and "step \\u2066isolated\\u2069" in html
    headline = re.search(r'<p class="es-error"><code>builtins.ValueError</code>: ([^<]*)</p>', html)
    assert headline is not None
    assert len(headline.group(1)) == run_page.MESSAGE_SHOWN
