"""A Django task's run in the UI and in ``everystep_show`` (issue 35): its task path,
queue, args and kwargs apart, and attempts; the runs list filters on the queue; the run
page's step table is ordered by step id, numerically, with start order left to the
timeline."""

from __future__ import annotations

import html as htmllib
import json
import re
from datetime import timedelta
from io import StringIO
from typing import Any
from uuid import UUID

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from everystep.models import Step, Workflow
from everystep.testing import run_due
from everystep.ui.views import RUNS_LIMIT
from tests.staff import staff_user
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff(client: Any) -> Any:
    client.force_login(staff_user(name="staff"))
    return client


def page(client: Any, url: str, **params: str) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def run_page(client: Any, run_id: Any, **params: str) -> str:
    return page(client, reverse("everystep:run", args=[run_id]), **params)


def listed(html: str) -> set[str]:
    return set(re.findall(r'class="es-id" href="[^"]+">([0-9a-f-]{36})<', html))


def test_a_task_runs_page_shows_its_task_queue_args_kwargs_and_attempts(staff):
    """A task run's page names its task and queue, shows args and kwargs apart and each
    attempt's worker and time."""
    result = tasks.add.enqueue(2, 3, scale=4)
    run_due()
    html = run_page(staff, result.id)
    assert "<dt>Task</dt><dd><code>tests.testapp.tasks.add</code>" in html
    assert "<dt>Queue</dt><dd>default</dd>" in html
    assert '<h3>Args</h3>\n<pre class="es-json">[2, 3]</pre>' in html
    assert '<h3>Kwargs</h3>\n<pre class="es-json">{&quot;scale&quot;: 4}</pre>' in html
    assert re.search(r"<dt>Attempts</dt><dd>everystep-testing <time ", html)


def test_a_workflow_runs_page_has_no_task_rows(staff):
    """A workflow run's page has no Task, Queue or Kwargs rows and shows its args whole."""
    run = Workflow.objects.create(name="wf.plain", args=[1, 2])
    html = run_page(staff, run.id)
    assert "<dt>Task</dt>" not in html and "<dt>Queue</dt>" not in html
    assert "<h3>Kwargs</h3>" not in html
    assert '<pre class="es-json">[1, 2]</pre>' in html


def test_the_runs_list_filters_on_the_queue(staff):
    """?queue= lists the task runs of that queue only; an unknown queue lists none."""
    mail = tasks.notify.enqueue("a@example.com")
    plain = tasks.add.enqueue(1, 1)
    other = Workflow.objects.create(name="wf.plain", args=[])
    html = page(staff, reverse("everystep:runs"), queue="emails")
    assert listed(html) == {mail.id}
    assert 'name="queue" value="emails"' in html
    assert listed(page(staff, reverse("everystep:runs"), queue="default")) == {plain.id}
    assert listed(page(staff, reverse("everystep:runs"), queue="nowhere")) == set()
    assert {mail.id, plain.id, str(other.id)} <= listed(page(staff, reverse("everystep:runs")))


def test_a_bulk_action_from_a_queue_filtered_list_keeps_the_queue(client):
    """The bulk actions a queue-filtered list offers keep the queue in their filter."""
    from everystep.store.bulk import RunFilter

    client.force_login(staff_user("cancel_workflow", name="canceller"))

    mail = tasks.notify.enqueue("a@example.com")
    tasks.add.enqueue(1, 1)
    matched = RunFilter(queue="emails").runs()
    assert [str(run.id) for run in matched] == [mail.id]
    html = page(client, reverse("everystep:runs"), queue="emails", status="scheduled")
    bulk_links = re.findall(r'class="es-bulk">(.*?)</p>', html, re.S)
    assert bulk_links and "queue=emails" in bulk_links[0]


def test_the_step_table_is_ordered_by_step_id_numerically(staff):
    """The step table lists steps by id, numerically, segment by segment; the timeline
    keeps start order; ?steps=all lists them as the paged table does."""
    run = Workflow.objects.create(name="wf.forked", args=[], status="completed")
    start = timezone.now() - timedelta(minutes=1)
    # Recorded in the order a fork's threads happened to start: 1.1 .. 1.10, then 1.0,
    # then 2 and a named step.
    order = [f"1.{n}" for n in range(1, 11)] + ["1.0", "2", "1", "10", "9", "1.named"]
    Step.objects.bulk_create(
        Step(
            workflow=run,
            step_id=step_id,
            name=f"wf.step_{n}",
            args=[],
            status="done",
            result=n,
            started_at=start + timedelta(milliseconds=10 * n),
            finished_at=start + timedelta(milliseconds=10 * n + 5),
        )
        for n, step_id in enumerate(order)
    )
    html = run_page(staff, run.id)
    table = html[html.index('<h2 id="steps">') : html.index('<h2 id="graph">')]
    shown = re.findall(r'id="step-([^"]+)"', table)
    assert shown == [
        "1",
        "1.0",
        "1.1",
        "1.2",
        "1.3",
        "1.4",
        "1.5",
        "1.6",
        "1.7",
        "1.8",
        "1.9",
        "1.10",
        "1.named",
        "2",
        "9",
        "10",
    ]
    timeline = html[html.index('<h2 id="timeline">') :]
    lanes = re.findall(r'es-lane-label">.*?<code>([^<]+)</code>', timeline, re.S)
    assert lanes == order, "the timeline keeps start order"
    everything = run_page(staff, run.id, steps="all")
    table = everything[everything.index('<h2 id="steps">') : everything.index('<h2 id="graph">')]
    assert re.findall(r'id="step-([^"]+)"', table) == shown


def test_everystep_show_prints_a_task_runs_task_queue_args_and_kwargs():
    """everystep_show prints a task run's task, queue, args, kwargs and attempts (and
    --json its queue and attempts)."""
    result = tasks.add.enqueue(2, 3, scale=4)
    run_due()
    out = StringIO()
    call_command("everystep_show", result.id, stdout=out)
    text = out.getvalue()
    assert re.search(r"^task +tests\.testapp\.tasks\.add$", text, re.M)
    assert re.search(r"^queue +default$", text, re.M)
    assert re.search(r"^args +\[2, ?3\]$", text, re.M)
    assert re.search(r'^kwargs +\{"scale": ?4\}$', text, re.M)
    assert re.search(r"^attempts +everystep-testing at ", text, re.M)
    out = StringIO()
    call_command("everystep_show", result.id, "--json", stdout=out)
    detail = json.loads(out.getvalue())
    assert detail["queue"] == "default"
    assert [attempt["worker"] for attempt in detail["attempts"]] == ["everystep-testing"]


def test_everystep_show_of_a_workflow_run_is_unchanged():
    """everystep_show of a workflow run prints its args whole and no task lines."""
    run = Workflow.objects.create(name="wf.plain", args=[1, 2])
    out = StringIO()
    call_command("everystep_show", str(run.id), stdout=out)
    text = out.getvalue()
    assert re.search(r"^args +\[1, ?2\]$", text, re.M)
    assert not re.search(r"^(task|queue|kwargs) ", text, re.M)


def test_the_runs_lists_paging_keeps_the_queue(staff):
    """The runs list's "Older" link keeps ?queue=, and each page lists that queue's runs."""
    mails = Workflow.objects.bulk_create(
        Workflow(name="tests.testapp.tasks.notify", args=[["a@example.com"], {}], queue="emails")
        for _ in range(RUNS_LIMIT + 5)
    )
    # Newer than every task run: without the queue, the second page would hold task runs
    # the first one listed.
    Workflow.objects.bulk_create(Workflow(name="wf.plain", args=[]) for _ in range(10))
    first = page(staff, reverse("everystep:runs"), queue="emails")
    older = re.search(r'<a rel="next" href="([^"]+)"', first)
    assert older is not None
    link = htmllib.unescape(older.group(1))
    assert "queue=emails" in link
    response = staff.get(link)
    assert response.status_code == 200
    second = response.content.decode()
    assert len(listed(first)) == RUNS_LIMIT
    assert listed(first) | listed(second) == {str(run.id) for run in mails}
    assert not listed(first) & listed(second)


def test_a_task_run_whose_arguments_are_not_args_and_kwargs_shows_them_whole(staff):
    """A task run whose stored arguments are not [args, kwargs] shows them whole, and
    its queue and task escaped, with no attempt yet."""
    run = Workflow.objects.create(
        name="tests.testapp.tasks.add", args=[1, 2, 3], queue="<b>mail</b>"
    )
    html = run_page(staff, run.id)
    assert "<dt>Queue</dt><dd>&lt;b&gt;mail&lt;/b&gt;</dd>" in html
    assert "<dt>Attempts</dt><dd>none yet</dd>" in html
    assert "<h3>Args</h3>" not in html and "<h3>Kwargs</h3>" not in html
    assert '<pre class="es-json">[1, 2, 3]</pre>' in html
    out = StringIO()
    call_command("everystep_show", str(run.id), stdout=out)
    text = out.getvalue()
    assert re.search(r"^args +\[1, ?2, ?3\]$", text, re.M)
    assert re.search(r"^attempts +-$", text, re.M)
    assert not re.search(r"^kwargs ", text, re.M)


def command(name: str, *args: str) -> str:
    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue().strip()


def test_the_bulk_commands_filter_on_the_queue():
    """everystep_cancel --queue counts (--dry-run) and cancels that queue's runs only."""
    mail = tasks.notify.enqueue("a@example.com")
    plain = tasks.add.enqueue(1, 1)
    other = Workflow.objects.create(name="wf.plain", args=[])
    dry = command("everystep_cancel", "--queue", "emails", "--dry-run")
    assert dry == "1 run match (filter queue=emails); nothing changed"
    assert (
        command("everystep_cancel", "--queue", "nowhere")
        == "cancelled 0 runs (filter queue=nowhere)"
    )
    assert (
        command("everystep_cancel", "--queue", "emails") == "cancelled 1 run (filter queue=emails)"
    )
    statuses = dict(Workflow.objects.values_list("id", "status"))
    assert statuses[UUID(mail.id)] == "cancelled"
    assert statuses[UUID(plain.id)] == statuses[other.id] == "scheduled"
    with pytest.raises(CommandError, match="not both"):
        command("everystep_cancel", mail.id, "--queue", "emails")
    with pytest.raises(CommandError, match="--queue is empty"):
        command("everystep_cancel", "--queue", " ")
