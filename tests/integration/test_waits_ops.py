"""Operating runs that sleep and wait: everystep_send, the waits in everystep_runs and
everystep_show, and the UI's wait display and send action."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from everystep import schedule, send
from everystep.models import Event, Step, Workflow
from everystep.testing import run_due
from tests.staff import staff_user
from tests.testapp import wait_workflows as ww
from tests.workers import ROOT, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes")]

MEGABYTE = "x" * (1 << 20)
UNKNOWN = "01a22f98-917e-79a0-9268-3f7c8434cff5"
HOUR = 3600


def fresh(run: Workflow) -> Workflow:
    return Workflow.objects.get(id=run.id)


def command(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def recorded() -> tuple[list[tuple[Any, ...]], ...]:
    """Every run, step and event row with every column: what refused input leaves as is."""
    return tuple(
        list(model.objects.order_by("id").values_list()) for model in (Workflow, Step, Event)
    )


@pytest.fixture
def waits() -> dict[str, Workflow]:
    """A run sleeping an hour, one waiting for "approval" without and one with a timeout,
    a start delayed by an hour, a run due now and a completed run."""
    runs = {
        "sleeping": schedule(ww.napper, HOUR),
        "waiting": schedule(ww.approval, 1, None),
        "deadline": schedule(ww.approval, 2, HOUR),
        "done": schedule(ww.right_away, 3),
    }
    run_due()
    runs["delayed"] = schedule(ww.right_away, 4, delay=HOUR)
    runs["due"] = schedule(ww.right_away, 5)
    found = {key: fresh(run) for key, run in runs.items()}
    assert [found[key].status for key in ("sleeping", "waiting", "deadline", "done")] == [
        "scheduled",
        "scheduled",
        "scheduled",
        "completed",
    ]
    return found


def when(moment: datetime | None, timespec: str) -> str:
    assert moment is not None
    return moment.isoformat(timespec=timespec)


# --- everystep_send ---------------------------------------------------------------------


def test_send_wakes_a_waiting_run_which_then_completes(waits, caplog):
    """everystep_send records the event, makes the waiting run due, and logs the send; the
    next pass takes the payload."""
    run = waits["waiting"]
    with caplog.at_level(logging.INFO, logger="everystep.ops"):
        out = command("everystep_send", str(run.id), "approval", "--payload", '{"by": "ann"}')
    assert out == f"sent approval to run {run.id}\n"
    woken = fresh(run)
    assert woken.due_at is not None and woken.due_at <= timezone.now()
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "run.event_sent"]
    assert (record.run_id, record.workflow, record.event_name, record.sent) == (
        str(run.id),
        run.name,
        "approval",
        True,
    )
    run_due()
    done = fresh(run)
    assert done.status == "completed"
    assert done.result == {"order": 1, "outcome": "approved", "decision": {"by": "ann"}}


def test_send_without_payload_sends_null(waits):
    """No --payload sends null, as send(run_id, name) does."""
    run = waits["deadline"]
    command("everystep_send", str(run.id), "approval")
    run_due()
    assert fresh(run).result == {"order": 2, "outcome": "approved", "decision": None}


def test_send_twice_keeps_the_first_payload_and_exits_0(waits):
    """A second send of the same name says so, succeeds, and keeps the first payload."""
    run = waits["waiting"]
    command("everystep_send", str(run.id), "approval", "--payload", '"first"')
    events = list(Event.objects.values_list())
    out = command("everystep_send", str(run.id), "approval", "--payload", '"second"')
    assert out == f"event approval was already sent to run {run.id}; the first payload stays\n"
    assert list(Event.objects.values_list()) == events
    run_due()
    assert fresh(run).result["decision"] == "first"


def refused(*args: str, match: str) -> str:
    """Run a command that must fail: its one-line, short message, matching ``match``."""
    with pytest.raises(CommandError, match=match) as info:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    message = str(info.value)
    assert "\n" not in message and len(message) < 500, message
    return message


BAD_SENDS = [
    pytest.param("not-a-uuid", "approval", [], "'not-a-uuid' is not a run id", id="malformed-id"),
    pytest.param(MEGABYTE, "approval", [], "is not a run id", id="megabyte-id"),
    pytest.param(UNKNOWN, "approval", [], f"no run with id {UNKNOWN}", id="unknown-run"),
    pytest.param("done", "approval", [], "is completed: events can only be sent", id="finished"),
    pytest.param("waiting", "", [], "an event name must be a non-empty string", id="empty-name"),
    pytest.param("waiting", "a\x00b", [], "the event name contains \\\\u0000", id="nul-name"),
    pytest.param("waiting", "a\udcff", [], "a lone surrogate", id="surrogate-name"),
    pytest.param("waiting", MEGABYTE, [], "event names have 255 at most", id="megabyte-name"),
    pytest.param("waiting", "approval", ["{no"], "--payload is not valid JSON", id="bad-json"),
    pytest.param("waiting", "approval", [""], "--payload is not valid JSON", id="empty-json"),
    pytest.param("waiting", "approval", [MEGABYTE], "not valid JSON", id="megabyte-json"),
    pytest.param("waiting", "approval", ["NaN"], "non-finite float", id="nan"),
    pytest.param("waiting", "approval", ["[" * 100_000], "nests too deeply", id="parser-depth"),
    pytest.param("waiting", "approval", ["[" * 40 + "]" * 40], "31 levels", id="stored-depth"),
]


@pytest.mark.parametrize("run_key, name, payload, match", BAD_SENDS)
def test_send_refuses_bad_input_with_one_line_and_changes_nothing(
    waits, run_key, name, payload, match
):
    """A malformed or unknown run id, a finished run, a bad name or a payload that is not
    JSON (or cannot be stored) is a one-line CommandError; no row changes."""
    run_id = str(waits[run_key].id) if run_key in waits else run_key
    extra = ["--payload", *payload] if payload else []
    before = recorded()
    refused("everystep_send", run_id, name, *extra, match=match)
    assert recorded() == before


@pytest.mark.parametrize("name", [b"appr\xffoval", b"\xed\xa0\x80"], ids=["ff", "surrogate"])
def test_a_name_that_is_not_utf8_exits_1_with_one_line(waits, name):
    """From a real shell, name bytes that are not UTF-8 end everystep_send with status 1
    and one CommandError line; nothing is sent."""
    argv = [sys.executable, str(ROOT / "manage.py"), "everystep_send", str(waits["waiting"].id)]
    done = subprocess.run(
        [*argv, name], cwd=ROOT, env=worker_env(), capture_output=True, timeout=120
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 1, stderr
    assert stderr.startswith("CommandError: the event name contains ") and stderr.count("\n") == 1
    assert not Event.objects.exists()


# --- everystep_runs and everystep_show --------------------------------------------------


def wait_cells(out: str) -> dict[str, str]:
    """Each listed run's wait column (after the six fixed ones), by run id."""
    lines = out.splitlines()
    assert lines[0].split() == [
        "id",
        "status",
        "name",
        "claimed_by",
        "created_at",
        "completed_at",
        "wait",
    ]
    return {line.split()[0]: " ".join(line.split()[6:]) for line in lines[1:]}


def test_runs_lists_what_each_run_waits_for(waits):
    """A last "wait" column says when a run wakes or starts, or the event it awaits;
    "-" for runs that are due, running or finished."""
    cells = wait_cells(command("everystep_runs"))
    at = {key: when(run.due_at, "seconds") for key, run in waits.items() if run.due_at}
    assert cells == {
        str(waits["sleeping"].id): f"sleeps until {at['sleeping']}",
        str(waits["waiting"].id): "waits for event approval",
        str(waits["deadline"].id): f"waits for event approval until {at['deadline']}",
        str(waits["delayed"].id): f"starts at {at['delayed']}",
        str(waits["due"].id): "-",
        str(waits["done"].id): "-",
    }


def test_runs_without_waiting_runs_has_no_wait_column(waits):
    """The wait column appears only when a listed run waits."""
    out = command("everystep_runs", "--status", "completed")
    assert out.splitlines()[0].split()[-1] == "completed_at"


def test_runs_json_has_the_wait_of_waiting_runs_only(waits):
    """--json adds a "wait" object to the runs that are not due yet, and only to them."""
    out = command("everystep_runs", "--json")
    rows = {row["id"]: row for row in map(json.loads, out.splitlines())}
    deadline, sleeping = waits["deadline"], waits["sleeping"]
    assert rows[str(deadline.id)]["wait"] == {
        "kind": "event",
        "until": deadline.due_at.isoformat(),
        "events": "approval",
    }
    assert rows[str(waits["waiting"].id)]["wait"] == {
        "kind": "event",
        "until": None,
        "events": "approval",
    }
    assert rows[str(sleeping.id)]["wait"]["kind"] == "sleep"
    assert rows[str(waits["delayed"].id)]["wait"]["kind"] == "start"
    assert "wait" not in rows[str(waits["due"].id)]
    assert "wait" not in rows[str(waits["done"].id)]


def test_show_prints_the_wait_under_the_status(waits):
    """everystep_show prints a "wait" line for a run that is not due yet, none otherwise."""
    sleeping, deadline = waits["sleeping"], waits["deadline"]
    out = command("everystep_show", str(sleeping.id))
    lines = out.splitlines()
    status = lines.index("status        scheduled")
    assert (
        lines[status + 1] == f"wait          sleeps until {when(sleeping.due_at, 'milliseconds')}"
    )
    out = command("everystep_show", str(deadline.id))
    until = when(deadline.due_at, "milliseconds")
    assert f"wait          waits for event approval until {until}\n" in out
    for key in ("done", "due"):
        lines = command("everystep_show", str(waits[key].id)).splitlines()
        assert not [line for line in lines if line.startswith("wait ")]


def test_show_json_has_the_due_time_and_awaited_events(waits):
    """--json adds due_at, waiting_for and the wait."""
    run = waits["waiting"]
    data = json.loads(command("everystep_show", str(run.id), "--json"))
    assert (data["due_at"], data["waiting_for"]) == (None, "approval")
    assert data["wait"] == {"kind": "event", "until": None, "events": "approval"}
    data = json.loads(command("everystep_show", str(waits["done"].id), "--json"))
    assert data["wait"] is None


def test_a_woken_run_no_longer_shows_a_wait(waits):
    """Once an event makes the run due, the listing shows it as due ("-")."""
    run = waits["deadline"]
    send(run.id, "approval")
    assert wait_cells(command("everystep_runs"))[str(run.id)] == "-"


# --- the UI -----------------------------------------------------------------------------


def staff(*perms: str) -> User:
    return staff_user(*perms)


def html_time(moment: datetime | None) -> str:
    """How the pages write a time (the test project's zone is UTC)."""
    assert moment is not None
    return f'<time datetime="{moment.isoformat()}">{moment:%Y-%m-%d %H:%M:%S}</time>'


def row_of(html: str, run: Workflow) -> str:
    start = html.index(f">{run.id}</a>")
    return html[start : html.index("</tr>", start)]


def test_runs_page_shows_what_each_run_waits_for(client, waits):
    """In the runs list a run that is not due yet says when it wakes or starts, or the
    event it awaits; the others say nothing of the kind."""
    client.force_login(staff())
    html = client.get(reverse("everystep:runs")).content.decode()
    at = {key: html_time(run.due_at) for key, run in waits.items() if run.due_at}
    assert f"sleeping until {at['sleeping']}" in row_of(html, waits["sleeping"])
    assert "waiting for approval</span>" in row_of(html, waits["waiting"])
    assert f"waiting for approval (until {at['deadline']})" in row_of(html, waits["deadline"])
    assert f"starts at {at['delayed']}" in row_of(html, waits["delayed"])
    for key in ("due", "done"):
        assert "es-wait" not in row_of(html, waits[key])


def run_page(client: Client, run: Workflow, **params: str) -> str:
    response = client.get(reverse("everystep:run", args=[run.id]), params)
    assert response.status_code == 200
    return response.content.decode()


def test_run_page_shows_the_wait_and_the_send_form(client, waits):
    """A waiting run's page says what it waits for and, with everystep.send_event, offers
    the send form; a finished run has no form."""
    client.force_login(staff("send_event"))
    deadline = waits["deadline"]
    html = run_page(client, deadline)
    assert f"waiting for approval (until {html_time(deadline.due_at)})" in html
    assert 'name="action" value="send"' in html and "Send event" in html
    assert "Send event" not in run_page(client, waits["done"])
    assert "sleeping until" in run_page(client, waits["sleeping"])


def act(client: Client, run: Workflow, **data: str) -> Any:
    return client.post(reverse("everystep:run-action", args=[run.id]), data)


def test_send_action_needs_the_permission(client, waits):
    """A staff user without everystep.send_event sees no form and gets 403; nothing sent."""
    run = waits["waiting"]
    client.force_login(staff("cancel_workflow"))
    assert "Send event" not in run_page(client, run)
    assert act(client, run, action="send", name="approval").status_code == 403
    assert not Event.objects.exists()
    assert fresh(run).due_at is None


def test_send_action_needs_a_csrf_token(waits):
    """A send POST without the CSRF token is refused; nothing sent."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff("send_event"))
    assert act(client, waits["waiting"], action="send", name="approval").status_code == 403
    assert not Event.objects.exists()


def test_send_action_wakes_the_run_and_is_logged(client, waits, caplog):
    """Sending from the run page makes the run due, says so, and is logged with the user;
    the next pass completes the run with the payload."""
    run = waits["waiting"]
    client.force_login(staff("send_event"))
    with caplog.at_level(logging.INFO, logger="everystep.ui"):
        response = act(client, run, action="send", name="approval", payload='{"by": "ann"}')
    assert response.status_code == 302 and response["Location"].endswith("?done=send")
    woken = fresh(run)
    assert woken.due_at is not None and woken.due_at <= timezone.now()
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "ui.send"]
    assert (record.user, record.run_id) == ("operator", str(run.id))
    assert "Done: event sent." in run_page(client, run, done="send")
    run_due()
    done = fresh(run)
    assert done.status == "completed"
    assert done.result["decision"] == {"by": "ann"}


def test_send_action_twice_keeps_the_first_payload(client, waits):
    """A second send of a name redirects with the "already sent" notice; the first
    payload stays."""
    run = waits["waiting"]
    client.force_login(staff("send_event"))
    act(client, run, action="send", name="approval", payload='"first"')
    response = act(client, run, action="send", name="approval", payload='"second"')
    assert response["Location"].endswith("?done=already-sent")
    notice = "Event already sent; the first payload stays."
    assert notice in run_page(client, run, done="already-sent")
    assert list(Event.objects.values_list("payload", flat=True)) == ["first"]


def test_send_action_with_an_empty_payload_sends_null(client, waits):
    """An empty payload field sends null."""
    run = waits["deadline"]
    client.force_login(staff("send_event"))
    act(client, run, action="send", name="approval", payload="  ")
    run_due()
    assert fresh(run).result["decision"] is None


BAD_FORMS = [
    pytest.param("waiting", {"name": "approval", "payload": "{no"}, "not valid JSON", id="json"),
    pytest.param("waiting", {"name": "approval", "payload": "NaN"}, "NaN", id="nan"),
    pytest.param("waiting", {"name": "approval", "payload": "[" * 100_000}, "nesting", id="deep"),
    pytest.param("waiting", {"name": "", "payload": "1"}, "non-empty", id="empty-name"),
    pytest.param("waiting", {"name": "a\x00", "payload": "1"}, "NUL", id="nul-name"),
    pytest.param("waiting", {"name": MEGABYTE}, "at most 255", id="megabyte-name"),
    pytest.param("done", {"name": "approval"}, "has finished", id="finished"),
]


@pytest.mark.parametrize("run_key, form, message", BAD_FORMS)
def test_bad_send_forms_redirect_with_an_error(client, waits, run_key, form, message):
    """Bad JSON, a bad name or a finished run comes back with error=…; nothing changes."""
    client.force_login(staff("send_event"))
    before = recorded()
    response = act(client, waits[run_key], action="send", **form)
    assert response.status_code == 302
    location = response["Location"]
    assert "error=" in location and "done=" not in location and len(location) < 2_000
    assert message in client.get(location).content.decode()
    assert recorded() == before


def test_a_delayed_start_shows_when_it_starts_and_takes_an_early_event(client, waits):
    """A delayed start says when it starts; an event sent before does not start it early
    (it awaits nothing yet) and is kept for its wait."""
    run = waits["delayed"]
    client.force_login(staff("send_event"))
    assert f"starts at {html_time(run.due_at)}" in run_page(client, run)
    assert act(client, run, action="send", name="approval")["Location"].endswith("?done=send")
    assert fresh(run).due_at == run.due_at
    assert Event.objects.filter(workflow=run).count() == 1
