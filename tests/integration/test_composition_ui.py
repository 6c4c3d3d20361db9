"""Child runs made visible: the run page's parent, children and composition steps, the
runs list's parent filter, everystep_show and everystep_runs, and the waiting gauge."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from everystep import metrics, schedule, send
from everystep.models import Status, Step, Workflow
from everystep.store.reports import queue_stats
from everystep.testing import run_due
from everystep.ui import family
from tests.integration.test_ui import page, run_url
from tests.staff import staff_user
from tests.testapp import composition_workflows as cw

pytestmark = pytest.mark.django_db(transaction=True)

START, GATHER = "everystep.start", "everystep.gather"


@pytest.fixture
def staff(client: Any, django_user_model: Any) -> Any:
    client.force_login(staff_user(name="staff"))
    return client


def linked_runs(html: str) -> list[str]:
    """The run ids of the run links in ``html``, in order."""
    return re.findall(r'class="es-id" href="/everystep/runs/([0-9a-f-]{36})/">\1<', html)


def between(html: str, start: str, end: str) -> str:
    return html[html.index(start) : html.index(end, html.index(start))]


def step_row(html: str, step_id: str) -> str:
    return between(html, f'<tr id="step-{step_id}">', "</tr>")


def command(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


def record(run: Workflow, step_id: str, name: str, **fields: Any) -> Step:
    now = timezone.now()
    return Step.objects.create(
        workflow=run, step_id=step_id, name=name, started_at=now, **({"status": "done"} | fields)
    )


def make_family(children: int) -> tuple[Workflow, list[Workflow]]:
    """A parent row and ``children`` child rows, the first made first, each with the
    parent's ``everystep.start`` record of it."""
    parent = Workflow.objects.create(name="wf.parent", args=[])
    kids = []
    for n in range(children):
        kid = Workflow.objects.create(name=f"wf.child{n}", args=[], parent=parent, status="failed")
        record(parent, f"c{n}", START, args=[kid.name, []], result={"run": str(kid.id)})
        kids.append(kid)
    return parent, kids


@pytest.fixture
def fanned() -> tuple[Workflow, list[Workflow]]:
    """A ``fan_out`` run of three children, waiting in its gather while each child
    waits for the event "go"."""
    parent = schedule(cw.fan_out, 3)
    run_due()
    parent.refresh_from_db()
    children = list(Workflow.objects.filter(parent=parent).order_by("id"))
    assert parent.status == Status.SCHEDULED and len(children) == 3
    return parent, children


# --- the run page ------------------------------------------------------------------


def test_run_page_lists_the_children_and_links_the_parent(staff, fanned):
    """A parent's page lists its children (links, statuses); a child's page links its parent."""
    parent, children = fanned
    html = page(staff, run_url(parent.id))
    listed = between(html, '<h2 id="children">', "</table>")
    assert linked_runs(listed) == [str(child.id) for child in children]
    assert listed.count('<span class="es-badge es-scheduled">scheduled</span>') == 3
    assert "waiting for go" in listed
    assert '<a href="#children">3 child runs</a>' in html
    assert f'href="/everystep/?parent={parent.id}"' in listed
    child_page = page(staff, run_url(children[0].id))
    facts = between(child_page, '<dl class="es-facts">', "</dl>")
    assert "<dt>Parent</dt>" in facts and linked_runs(facts) == [str(parent.id)]
    assert '<span class="es-badge es-scheduled">scheduled</span>' in facts
    assert 'id="children"' not in child_page and "<dt>Parent</dt>" not in html


def test_start_and_gather_steps_link_their_runs(staff, fanned):
    """Each ``everystep.start`` row links the child it started; the ``everystep.gather``
    row links the runs it awaits, then, once settled, the runs it awaited."""
    parent, children = fanned
    html = page(staff, run_url(parent.id))
    for step_id, child in zip("123", children, strict=True):
        row = step_row(html, step_id)
        assert START in row and "child run" in row
        assert linked_runs(row) == [str(child.id)]
    gather = step_row(html, "4")
    assert "awaits" in gather and linked_runs(gather) == [str(child.id) for child in children]
    for child in children:
        send(child.id, "go")
    run_due()
    parent.refresh_from_db()
    assert (parent.status, parent.result) == (Status.COMPLETED, 30)
    gather = step_row(page(staff, run_url(parent.id)), "4")
    assert "awaited" in gather and linked_runs(gather) == [str(child.id) for child in children]


def test_children_are_capped_with_a_link_to_all_of_them(staff):
    """Past 50 children the page lists the first 50 and links the runs list filtered by parent."""
    parent, kids = make_family(family.CHILDREN_SHOWN + 3)
    html = page(staff, run_url(parent.id))
    listed = between(html, '<h2 id="children">', "</table>")
    assert linked_runs(listed) == [str(kid.id) for kid in kids[: family.CHILDREN_SHOWN]]
    assert f"the first {family.CHILDREN_SHOWN} of {family.CHILDREN_SHOWN + 3}" in listed
    assert f'<a href="/everystep/?parent={parent.id}">' in listed
    assert f"{family.CHILDREN_SHOWN + 3} child runs" in html


def test_awaited_runs_are_capped_and_only_run_ids_are_linked(staff):
    """A wait on many runs links the first ten and counts the rest; stored values that
    are not run ids (a hand-settled record) are not linked, and everything is escaped."""
    parent, kids = make_family(15)
    awaited = [str(kid.id) for kid in kids]
    record(parent, "1", GATHER, status="started", args=awaited, result={"runs": awaited})
    evil = '"><script>alert(1)</script>'
    record(parent, "2", START, result={"run": evil, "workflow": evil})
    record(parent, "3", "everystep.result", args=[evil, awaited[0]])
    html = page(staff, run_url(parent.id))
    gather = step_row(html, "1")
    assert linked_runs(gather) == awaited[: family.LINKED_SHOWN]
    assert f"and {15 - family.LINKED_SHOWN} more" in gather
    assert linked_runs(step_row(html, "2")) == [] and "child run" not in step_row(html, "2")
    assert linked_runs(step_row(html, "3")) == [awaited[0]]
    assert "<script>" not in html


# --- the runs list -----------------------------------------------------------------


def test_runs_list_filters_by_parent(staff):
    """``?parent=ID`` lists that run's children only; the counts, the paging links and
    the form follow it, and a link clears it."""
    parent, kids = make_family(3)
    make_family(2)  # another parent's children
    html = page(staff, reverse("everystep:runs"), parent=str(parent.id))
    assert linked_runs(between(html, "<tbody>", "</tbody>")) == [str(k.id) for k in kids[::-1]]
    assert re.search(r'data-status="failed">3<', html)
    assert re.search(r'data-status="scheduled">0<', html)
    assert f'name="parent" value="{parent.id}"' in html
    assert f'href="/everystep/?parent={parent.id}&amp;status=failed"' in html
    active = between(html, "<p>Child runs of run", "</p>")
    assert linked_runs(active) == [str(parent.id)]
    assert 'href="/everystep/">Show runs of any parent</a>' in active
    plain = page(staff, reverse("everystep:runs"))
    assert len(linked_runs(between(plain, "<tbody>", "</tbody>"))) == 7
    assert "Child runs of run" not in plain


@pytest.mark.parametrize("value", ["nonsense", "0190" * 40, "1234\x00", "<b>x</b>"])
def test_a_bad_parent_filter_matches_nothing_with_a_notice(staff, value):
    """A parent that is not a run id is a notice and an empty list, never an error page."""
    make_family(2)
    html = page(staff, reverse("everystep:runs"), parent=value)
    assert "is not a run id (a UUID); no run matches it." in html
    assert linked_runs(between(html, "<tbody>", "</tbody>")) == []
    assert "<b>x</b>" not in html


# --- the commands ------------------------------------------------------------------


def test_show_prints_the_parent_and_the_children(fanned):
    """everystep_show names the parent of a child, and a parent's children with their
    statuses; a waiting parent's wait names what it awaits."""
    parent, children = fanned
    out = command("everystep_show", str(parent.id))
    assert "wait          waits for 3 runs\n" in out
    block = out.split("children (3):\n")[1].split("steps (4):")[0].splitlines()
    assert [line.split() for line in block] == [
        [str(child.id), "scheduled", child.name] for child in children
    ]
    out = command("everystep_show", str(children[1].id))
    assert f"parent        {parent.id} {parent.name} (scheduled)\n" in out
    assert "children (" not in out
    lone = schedule(cw.one_child, 1)
    run_due()
    out = command("everystep_show", str(lone.id))
    (child,) = Workflow.objects.filter(parent=lone)
    assert f"wait          waits for run {child.id}\n" in out


def test_show_caps_the_children_it_lists():
    """Past 20 children everystep_show lists the first 20 and says how to list the rest;
    --json has the parent, the exact count and the first children."""
    parent, kids = make_family(23)
    out = command("everystep_show", str(parent.id))
    block = out.split("children (23):\n")[1].split("steps (23):")[0].splitlines()
    assert [line.split()[0] for line in block[:-1]] == [str(kid.id) for kid in kids[:20]]
    assert block[-1] == f"  … 3 more: manage.py everystep_runs --parent {parent.id}"
    data = json.loads(command("everystep_show", str(parent.id), "--json"))
    assert data["parent"] is None and data["children_count"] == 23
    assert data["children"][0] == {"id": str(kids[0].id), "name": "wf.child0", "status": "failed"}
    assert len(data["children"]) == 20
    data = json.loads(command("everystep_show", str(kids[0].id), "--json"))
    assert data["parent"] == {"id": str(parent.id), "name": "wf.parent", "status": "scheduled"}
    assert (data["children_count"], data["children"]) == (0, [])


def test_runs_command_filters_by_parent():
    """everystep_runs --parent lists that run's children; --json names each one's parent."""
    parent, kids = make_family(2)
    other, _ = make_family(1)
    out = command("everystep_runs", "--parent", str(parent.id))
    assert [line.split()[0] for line in out.splitlines()[1:]] == [str(k.id) for k in kids[::-1]]
    rows = [json.loads(line) for line in command("everystep_runs", "--json").splitlines()]
    parents = {row["id"]: row.get("parent") for row in rows}
    assert parents[str(kids[0].id)] == str(parent.id)
    assert parents[str(parent.id)] is None and parents[str(other.id)] is None
    with pytest.raises(CommandError, match="'nope' is not a run id"):
        command("everystep_runs", "--parent", "nope")


# --- metrics -----------------------------------------------------------------------


def test_a_parent_waiting_for_its_child_counts_as_waiting():
    """A parent suspended in result() is scheduled and not due: the waiting gauge counts
    it (beside its child, waiting for an event), and it leaves the gauge once woken."""
    parent = schedule(cw.one_child, 7)
    run_due()
    parent.refresh_from_db()
    (child,) = Workflow.objects.filter(parent=parent)
    assert (parent.status, parent.due_at, parent.waiting_for) == (
        Status.SCHEDULED,
        None,
        f"run {child.id}",
    )
    stats = queue_stats()
    assert (stats["waiting"], stats["pending"]) == (2, 0)
    gauges = {gauge.name: gauge for gauge in metrics.QueueCollector().collect()}
    assert gauges["everystep_workflows_waiting"].samples[0].value == 2
    send(child.id, "go")
    run_due()
    parent.refresh_from_db()
    assert (parent.status, parent.result) == (Status.COMPLETED, 70)
    assert queue_stats()["waiting"] == 0
