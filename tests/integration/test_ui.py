"""The read-only UI: access control, the runs list, one run's page and the runners."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from everystep import schedule
from everystep.models import Runner, Status, Step, Workflow
from everystep.testing import run_due
from tests.staff import staff_user
from tests.testapp import workflows

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("several")]

PAGES = ["everystep:runs", "everystep:runners", "everystep:audit"]


def page(client: Any, url: str, **params: str) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def run_url(run_id: Any) -> str:
    return reverse("everystep:run", args=[run_id])


def listed_ids(html: str) -> list[str]:
    return re.findall(r'class="es-id" href="[^"]+">([0-9a-f-]{36})<', html)


def count_of(html: str, status: str) -> int:
    match = re.search(rf'data-status="{status}">(\d+)<', html)
    assert match is not None, status
    return int(match.group(1))


def make_run(status: str = Status.COMPLETED, name: str = "wf.a", **fields: Any) -> Workflow:
    return Workflow.objects.create(name=name, status=status, args=[1], **fields)


@pytest.fixture
def staff(client: Any, django_user_model: Any) -> Any:
    client.force_login(staff_user(name="staff"))
    return client


@pytest.fixture
def some_run() -> Workflow:
    return make_run()


# --- access ------------------------------------------------------------------------


def all_urls(run: Workflow) -> list[str]:
    return [reverse(name) for name in PAGES] + [run_url(run.id)]


def assert_sent_to_login(client: Any, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login") + "?next=")


def test_anonymous_is_sent_to_login(client, some_run):
    """Every page redirects an anonymous visitor to the admin login."""
    for url in all_urls(some_run):
        assert_sent_to_login(client, url)


def test_non_staff_user_is_sent_to_login(client, django_user_model, some_run):
    """A logged-in user without is_staff is redirected, not shown the runs."""
    client.force_login(django_user_model.objects.create_user("plain", password="pw"))
    for url in all_urls(some_run):
        assert_sent_to_login(client, url)


def test_inactive_staff_user_is_sent_to_login(client, django_user_model, some_run):
    """A deactivated staff account is not let in."""
    user = django_user_model.objects.create_user("gone", password="pw", is_staff=True)
    client.force_login(user)
    django_user_model.objects.filter(pk=user.pk).update(is_active=False)
    for url in all_urls(some_run):
        assert_sent_to_login(client, url)


def test_staff_without_the_view_permission_is_refused(client, some_run):
    """A staff user without everystep.view_workflow (403 in the admin too) gets 403 on
    every page, and not a word of the runs."""
    client.force_login(staff_user(name="viewless", view=False))
    for url in all_urls(some_run):
        response = client.get(url)
        assert response.status_code == 403, url
        assert str(some_run.id) not in response.content.decode()


def test_a_superuser_needs_no_explicit_permission(client, django_user_model, some_run):
    client.force_login(django_user_model.objects.create_superuser("root", "", "pw"))
    for url in all_urls(some_run):
        assert client.get(url).status_code == 200, url


SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def test_every_response_carries_the_security_headers(staff, some_run):
    """Pages, refusals and the write actions' answers: none can be framed by another
    site, whatever middleware the project has (the test project has none of Django's)."""
    responses = [staff.get(url) for url in all_urls(some_run)]
    responses.append(staff.post(reverse("everystep:run-action", args=[some_run.id]), {}))
    responses.append(staff.post(reverse("everystep:runner-requeue"), {"runner": "x"}))
    for response in responses:
        for header, value in SECURITY_HEADERS.items():
            assert response.headers.get(header) == value, (response.request, header)


def test_public_opt_out_lets_anonymous_in(client, settings, some_run):
    """EVERYSTEP_UI_PUBLIC = True serves every page about runs without a login; the
    audit trail, which names people, still needs one."""
    settings.EVERYSTEP_UI_PUBLIC = True
    audit = reverse("everystep:audit")
    for url in all_urls(some_run):
        assert client.get(url).status_code == (302 if url == audit else 200), url


def test_public_opt_out_needs_exactly_true(client, settings, some_run):
    """A merely truthy EVERYSTEP_UI_PUBLIC (a string) keeps the login requirement."""
    settings.EVERYSTEP_UI_PUBLIC = "False"
    assert_sent_to_login(client, reverse("everystep:runs"))


def test_write_methods_are_refused(staff, some_run):
    """The UI is read-only: POST gets 405 on every page."""
    for url in all_urls(some_run):
        assert staff.post(url).status_code == 405


# --- runs list ---------------------------------------------------------------------


def test_runs_list_shows_runs_newest_first_with_counts(staff):
    """Runs are listed newest first, with per-status counts over all runs."""
    made = [make_run(Status.COMPLETED), make_run(Status.FAILED), make_run(Status.COMPLETED)]
    make_run(Status.RUNNING, claimed_by="worker-7")
    html = page(staff, reverse("everystep:runs"))
    assert listed_ids(html)[1:] == [str(run.id) for run in reversed(made)]
    assert "worker-7" in html
    assert count_of(html, "completed") == 2
    assert count_of(html, "failed") == 1
    assert count_of(html, "running") == 1
    assert count_of(html, "blocked") == 0


def test_runs_list_filters_by_status_workflow_and_runner(staff):
    """The status, workflow and runner filters narrow the list; counts follow the workflow."""
    a_done = make_run(Status.COMPLETED, "wf.a")
    a_failed = make_run(Status.FAILED, "wf.a")
    b_failed = make_run(Status.FAILED, "wf.b", claimed_by="r1")
    url = reverse("everystep:runs")
    assert listed_ids(page(staff, url, status="failed")) == [str(b_failed.id), str(a_failed.id)]
    html = page(staff, url, workflow="wf.a")
    assert listed_ids(html) == [str(a_failed.id), str(a_done.id)]
    assert (count_of(html, "failed"), count_of(html, "completed")) == (1, 1)
    assert listed_ids(page(staff, url, status="failed", workflow="wf.a")) == [str(a_failed.id)]
    assert listed_ids(page(staff, url, runner="r1")) == [str(b_failed.id)]
    assert listed_ids(page(staff, url, workflow="wf.none")) == []


def test_unknown_status_is_ignored_with_a_notice(staff):
    """An unknown status filter is ignored and says so; the page still lists every run."""
    runs = [make_run(Status.COMPLETED), make_run(Status.FAILED)]
    html = page(staff, reverse("everystep:runs"), status="exploded")
    assert "Unknown status &#x27;exploded&#x27; ignored" in html
    assert len(listed_ids(html)) == len(runs)


def test_runs_list_stops_at_the_200_most_recent(staff):
    """Only the 200 newest runs are listed."""
    Workflow.objects.bulk_create(Workflow(name="wf.bulk", args=[]) for _ in range(205))
    newest = list(Workflow.objects.order_by("-id").values_list("id", flat=True))
    ids = listed_ids(page(staff, reverse("everystep:runs")))
    assert ids == [str(run_id) for run_id in newest[:200]]


def test_auto_refresh_only_when_ticked(staff, some_run):
    """The meta refresh appears only with ?refresh=1, on every page that offers it (the
    audit trail does not)."""
    refresh = '<meta http-equiv="refresh" content="5">'
    for url in all_urls(some_run):
        if url == reverse("everystep:audit"):
            continue
        assert refresh not in page(staff, url)
        html = page(staff, url, refresh="1")
        assert refresh in html
        assert 'name="refresh" value="1" checked' in html


# --- one run -----------------------------------------------------------------------


def section(html: str, css_class: str) -> str:
    start = html.index(f'<div class="{css_class}">')
    return html[start:]


def test_forked_run_page_shows_steps_graph_and_timeline(staff):
    """A finished ``forked`` run shows its six steps, the fork graph and six bars."""
    run = schedule(workflows.forked)
    run_due()
    html = page(staff, run_url(run.id))
    expected = ["1", "fan.0.1", "fan.1.right", "fan.2.1", "fan.2.2", "3"]
    assert sorted(re.findall(r'<tr id="step-([^"]+)">', html)) == sorted(expected)
    assert "tests.testapp.workflows.echo" in html
    assert '<span class="es-badge es-completed">completed</span>' in html
    assert "&quot;head&quot;" in html  # the result, pretty-printed and escaped

    graph = section(html, "es-graph")
    assert re.findall(r'href="#step-([^"]+)"', graph) == expected
    assert "fork <code>fan</code>" in graph
    assert graph.count('<div class="es-branch">') == 3

    bars = re.findall(r'class="es-bar es-done" style="left: ([\d.]+)%; width: ([\d.]+)%"', html)
    assert len(bars) == len(expected)
    assert all(0 <= float(left) <= float(left) + float(width) <= 100 for left, width in bars)
    assert min(float(left) for left, _ in bars) == 0


def test_failed_run_page_shows_the_error(staff):
    """A failed run shows the error's type and message instead of a result."""
    run = schedule(workflows.failing)
    run_due()
    html = page(staff, run_url(run.id))
    assert "<code>builtins.ValueError</code>: boom" in html
    assert "<h2>Result</h2>" not in html
    assert '<span class="es-badge es-failed">failed</span>' in html


def test_run_without_steps_has_no_graph(staff):
    """A scheduled run shows its arguments and says no steps are recorded yet."""
    run = Workflow.objects.create(name="wf.pending", args=[{"order": 17}])
    html = page(staff, run_url(run.id))
    assert "&quot;order&quot;: 17" in html
    assert "No steps recorded yet." in html
    assert 'class="es-graph"' not in html


def test_run_page_shows_a_result_only_for_a_run_that_has_one(staff):
    """A scheduled or running run has no Result box (no "null" standing for a result
    not there yet); a completed run shows its result, a None result too."""
    for status in (Status.SCHEDULED, Status.RUNNING, Status.BLOCKED):
        html = page(staff, run_url(make_run(status).id))
        assert "<h2>Result</h2>" not in html, status
    done = make_run(Status.COMPLETED, result={"shipped": 3})
    assert "<h2>Result</h2>" in page(staff, run_url(done.id))
    returned_none = make_run(Status.COMPLETED, result=None)
    assert '<h2>Result</h2>\n<pre class="es-json">null</pre>' in page(
        staff, run_url(returned_none.id)
    )


def test_run_page_shows_the_idempotency_key_only_when_the_run_has_one(staff):
    """No empty "Idempotency key" row for a run scheduled without a key; the key when
    it has one."""
    assert "Idempotency key" not in page(staff, run_url(make_run().id))
    keyed = make_run(idempotency_key="order-42")
    assert "<dt>Idempotency key</dt><dd>order-42</dd>" in page(staff, run_url(keyed.id))


def test_unknown_run_is_404(staff):
    """A run id that does not exist gives 404."""
    assert staff.get(run_url(uuid.uuid4())).status_code == 404


def test_user_data_is_escaped(staff):
    """Arguments, names, step ids and results are HTML-escaped, never injected raw."""
    evil = "<script>alert(1)</script>"
    run = Workflow.objects.create(
        name=f"wf{evil}", args=[evil], status=Status.FAILED, error={"type": evil, "message": evil}
    )
    now = timezone.now()
    Step.objects.create(
        workflow=run, step_id='x"><b>', name=evil, status="done", result=evil, started_at=now
    )
    for url in (run_url(run.id), reverse("everystep:runs")):
        html = page(staff, url)
        assert evil not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert 'x"><b>' not in html
    listed = page(staff, reverse("everystep:runs"), workflow=f"wf{evil}")
    assert listed_ids(listed) == [str(run.id)]
    assert evil not in listed


# --- runners -----------------------------------------------------------------------


def make_runner(name: str, *, age: float = 0.0, **fields: Any) -> Runner:
    now = timezone.now()
    defaults = {"boot_id": uuid.uuid4(), "pool_size": 4, "started_at": now}
    return Runner.objects.create(
        name=name, last_seen=now - timedelta(seconds=age), **(defaults | fields)
    )


def test_runners_page_shows_heartbeats_and_held_runs(staff):
    """Each runner's row shows its pool and how many running runs it holds; holders
    without a heartbeat row are listed apart, and a silent runner is marked late."""
    make_runner("alpha", inflight=2)
    make_runner("beta", age=3600, draining=True)
    for _ in range(2):
        make_run(Status.RUNNING, claimed_by="alpha")
    make_run(Status.COMPLETED, claimed_by="alpha")
    make_run(Status.RUNNING, claimed_by="ghost")
    html = page(staff, reverse("everystep:runners"))
    rows = re.findall(r"<tr>\s*<td>(\w+)</td>(.*?)</tr>", html, re.S)
    by_name = {name: body for name, body in rows}
    assert set(by_name) == {"alpha", "beta", "ghost"}
    assert 'runner=alpha">2</a>' in by_name["alpha"]
    assert 'runner=beta">0</a>' in by_name["beta"]
    assert "draining" in by_name["beta"] and "late" in by_name["beta"]
    assert "late" not in by_name["alpha"] and "draining" not in by_name["alpha"]
    assert "Runs held by runners without a heartbeat" in html
    assert 'runner=ghost">1</a>' in by_name["ghost"]


def test_runners_page_without_runners(staff):
    """With no heartbeat rows the page says so."""
    assert "No runner has sent a heartbeat." in page(staff, reverse("everystep:runners"))


def test_status_counts_stop_at_their_cap():
    """Counts per status are exact up to the cap and say "more than" beyond it."""
    from everystep.store.reports import status_counts

    for _ in range(3):
        make_run(Status.SCHEDULED)
    assert status_counts(cap=5)["scheduled"] == 3
    assert status_counts(cap=2)["scheduled"] == 3  # cap + 1: "more than 2"
    assert status_counts(cap=2)["completed"] == 0
