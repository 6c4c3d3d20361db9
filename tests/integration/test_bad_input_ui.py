"""Bad input to the UI's pages and actions: malformed and unknown run ids, wrong methods,
missing CSRF tokens, NUL, bytes that are not UTF-8, huge values and JSON that is not
JSON. Each gets a clear answer (never a 500 or a traceback) and changes no row."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import reverse

from everystep import schedule, serde, stored_errors
from everystep.models import Step, Workflow
from everystep.testing import run_due
from tests.staff import staff_user
from tests.testapp import bad_workflows as bad
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = "/everystep/"
ACTIONS = ("cancel", "requeue", "resolve")
MEGABYTE = "x" * (1 << 20)


def recorded() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every run and step row with every column: what refused input must leave as is."""
    runs = list(Workflow.objects.order_by("id").values_list())
    steps = list(Step.objects.order_by("id").values_list())
    return runs, steps


def operator(client: Client) -> Client:
    """``client`` logged in as a staff user holding every action's permission."""
    client.force_login(staff_user("cancel_workflow", "requeue_workflow", "resolve_workflow"))
    return client


@pytest.fixture
def staff(client: Client) -> Client:
    return operator(client)


@pytest.fixture
def history(blocked_run: Workflow) -> dict[str, Workflow]:
    """A blocked, a completed, a failed, a running and a scheduled run."""
    done, failed = schedule(wf.sequential, 1, 2), schedule(wf.failing)
    run_due()
    running = schedule(wf.sequential, 3, 4)
    Workflow.objects.filter(id=running.id).update(status="running", claimed_by="w1")
    return {
        "blocked": blocked_run,
        "completed": done,
        "failed": failed,
        "running": running,
        "scheduled": schedule(wf.sequential, 5, 6),
    }


def assert_clear(response: Any, status: int) -> str:
    """The expected status, and a body without a traceback or SQL."""
    assert response.status_code == status, response.status_code
    body = response.content.decode(errors="replace")
    # A failed or blocked run's own recorded traceback is part of its page (collapsed
    # under its error); anything else that looks like one leaked from the server.
    shown = TRACEBACKS.sub("", body)
    for leak in ("Traceback", "DataError", "psycopg", "MySQLdb", "sqlite3", "SELECT "):
        assert leak not in shown
    return body


TRACEBACKS = re.compile(r'<summary>Traceback</summary><pre class="es-trace">.*?</pre>', re.S)


def action_url(run_id: Any) -> str:
    return reverse("everystep:run-action", args=[run_id])


def listed(html: str) -> int:
    return html.count('class="es-id"')


# --- ids in the path ------------------------------------------------------------------


BAD_IDS = [
    "not-a-uuid",
    "%FF%FE",  # not UTF-8
    "%00",
    "%ED%A0%80",  # UTF-8 of a lone surrogate
    "01a22f98-917e-79a0-9268-3f7c8434cff5x",
    "01A22F98-917E-79A0-9268-3F7C8434CFF5",  # upper case: not the converter's form
    "0" * 10_000,
]


@pytest.mark.parametrize("run_id", BAD_IDS, ids=range(len(BAD_IDS)))
def test_malformed_run_ids_are_404(staff, history, run_id):
    """A run id that is not a UUID, in a page or an action URL, is a 404."""
    before = recorded()
    assert_clear(staff.get(f"{RUNS}runs/{run_id}/"), 404)
    assert_clear(staff.post(f"{RUNS}runs/{run_id}/action/", {"action": "cancel"}), 404)
    assert recorded() == before


def test_unknown_run_id_is_404_for_pages_and_actions(staff, history):
    """A well-formed id of no run is a 404, also for every action (not a redirect to one)."""
    before = recorded()
    missing = "01a22f98-917e-79a0-9268-3f7c8434cff5"
    assert_clear(staff.get(reverse("everystep:run", args=[missing])), 404)
    for action in ACTIONS:
        data = {"action": action, "step_id": "2", "mode": "discard"}
        assert_clear(staff.post(action_url(missing), data), 404)
    assert recorded() == before


# --- methods and CSRF ----------------------------------------------------------------


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete", "options"])
def test_pages_refuse_other_methods(staff, history, method):
    """The read-only pages answer 405 to anything but GET and HEAD."""
    before = recorded()
    urls = [
        RUNS,
        reverse("everystep:runners"),
        reverse("everystep:run", args=[history["failed"].id]),
    ]
    for url in urls:
        assert_clear(getattr(staff, method)(url), 405)
        assert_clear(staff.head(url), 200)
    assert recorded() == before


@pytest.mark.parametrize("method", ["get", "head", "put", "patch", "delete", "options"])
def test_actions_refuse_other_methods(staff, history, method):
    """The action URL answers 405 to anything but POST, whatever the run."""
    before = recorded()
    for run in history.values():
        assert_clear(getattr(staff, method)(action_url(run.id)), 405)
    assert recorded() == before


@pytest.mark.parametrize("token", [None, "forged" * 8])
def test_actions_without_a_valid_csrf_token_are_refused(history, token):
    """Cancel, requeue and resolve without (or with a forged) CSRF token are 403."""
    client = operator(Client(enforce_csrf_checks=True))
    before = recorded()
    for action, run in (("cancel", "scheduled"), ("requeue", "running"), ("resolve", "blocked")):
        data = {"action": action, "step_id": "2", "mode": "discard"}
        if token is not None:
            data["csrfmiddlewaretoken"] = token
        assert_clear(client.post(action_url(history[run].id), data), 403)
    assert recorded() == before


# --- filters ----------------------------------------------------------------------------


@pytest.mark.parametrize("param", ["runner", "workflow"])
@pytest.mark.parametrize("value", ["%00", "a%00b", "%00" * 300])
def test_nul_in_a_filter_lists_nothing_with_a_notice(staff, history, param, value):
    """A NUL in the runner or workflow filter (PostgreSQL answered 500) shows no runs,
    zero counts and a notice saying why, on every database."""
    html = assert_clear(staff.get(f"{RUNS}?{param}={value}"), 200)
    assert listed(html) == 0
    assert f"The {param} filter contains \\u0000" in html
    assert "no run matches it" in html
    assert 'data-status="completed">0<' in html


@pytest.mark.parametrize("value", ["%FF%FE", "%ED%A0%80", "%C3%28"])
def test_filters_that_are_not_utf8_match_nothing(staff, history, value):
    """Percent-encoded bytes that are not UTF-8 are read as U+FFFD: no run matches."""
    for param in ("runner", "workflow"):
        html = assert_clear(staff.get(f"{RUNS}?{param}={value}"), 200)
        assert listed(html) == 0
    html = assert_clear(staff.get(f"{RUNS}?status={value}"), 200)
    assert "Unknown status" in html
    assert listed(html) == len(history)


def test_huge_filters_are_ignored_with_a_short_notice(staff, history):
    """A megabyte in a filter or the status is ignored, and the notice stays short."""
    for param in ("runner", "workflow", "status"):
        html = assert_clear(staff.get(RUNS, {param: MEGABYTE}), 200)
        assert listed(html) == len(history)
        assert len(html) < 100_000
    html = assert_clear(staff.get(RUNS, {"status": "\x00"}), 200)
    assert "Unknown status &#x27;\\x00&#x27; ignored" in html


@pytest.mark.parametrize("param", ["refresh", "error", "done"])
@pytest.mark.parametrize("value", ["%00", "%FF", quote(MEGABYTE)])
def test_run_page_query_parameters_never_break_it(staff, history, param, value):
    """refresh, error and done with NUL, bytes that are not UTF-8 or a megabyte: 200, and
    the echoed notice is cut short."""
    url = reverse("everystep:run", args=[history["blocked"].id])
    html = assert_clear(staff.get(f"{url}?{param}={value}"), 200)
    assert len(html) < 100_000


@pytest.mark.parametrize("value", ["%00", "%FF", quote(MEGABYTE)])
def test_runners_page_query_parameters_never_break_it(staff, history, value):
    """The runners page ignores what it does not understand in its query string."""
    html = assert_clear(staff.get(f"{reverse('everystep:runners')}?refresh={value}"), 200)
    assert len(html) < 100_000


# --- action forms ------------------------------------------------------------------------


def act(client: Client, run: Workflow, **data: str) -> Any:
    return client.post(action_url(run.id), data)


def refused(response: Any) -> str:
    """The error an action redirected back with (and that the run page shows)."""
    assert_clear(response, 302)
    location = response["Location"]
    assert "error=" in location and "done=" not in location
    assert len(location) < 2_000
    return location


BAD_FORMS = [
    {"action": ""},
    {"action": "\x00"},
    {"action": MEGABYTE},
    {"action": "resolve", "step_id": "\x00", "mode": "discard"},
    {"action": "resolve", "step_id": "2\x00", "mode": "result", "value": "1"},
    {"action": "resolve", "step_id": MEGABYTE, "mode": "discard"},
    {"action": "resolve", "step_id": "2", "mode": "\x00"},
    {"action": "resolve", "step_id": "2", "mode": MEGABYTE},
    {"action": "resolve", "step_id": "2", "mode": "result", "value": "{no"},
    {"action": "resolve", "step_id": "2", "mode": "result", "value": ""},
    {"action": "resolve", "step_id": "2", "mode": "result", "value": "NaN"},
    {"action": "resolve", "step_id": "2", "mode": "result", "value": "[1e999]"},
    {"action": "resolve", "step_id": "2", "mode": "result", "value": "\x00"},
    {"action": "resolve", "step_id": "2", "mode": "result", "value": "[" * 100_000},
    {"action": "resolve", "step_id": "2", "mode": "result", "value": "[" * 40 + "]" * 40},
    {"action": "resolve", "step_id": "2", "mode": "result", "value": MEGABYTE},
    # Past Python's 4,300 digits an int is a ValueError of its own, not a JSON error.
    {"action": "resolve", "step_id": "2", "mode": "result", "value": "1" * 5_000},
    {"action": "resolve", "step_id": "2", "mode": "result", "value": "[" + "9" * 5_000 + "]"},
    {"action": "resolve", "step_id": "2", "mode": "error", "value": " \x0b "},
    {"action": "resolve", "step_id": "1", "mode": "discard"},  # done, not started
]


@pytest.mark.parametrize("form", BAD_FORMS, ids=range(len(BAD_FORMS)))
def test_bad_action_forms_redirect_with_an_error(staff, history, form):
    """Every malformed action form on the blocked run comes back with an error message
    (cut short) and changes nothing."""
    before = recorded()
    refused(act(staff, history["blocked"], **form))
    assert recorded() == before


@pytest.mark.parametrize(
    "action, run",
    [
        ("cancel", "completed"),
        ("cancel", "failed"),
        ("requeue", "scheduled"),
        ("requeue", "blocked"),
        ("resolve", "running"),
    ],
)
def test_actions_on_a_run_in_the_wrong_state_redirect_with_an_error(staff, history, action, run):
    """An action the run's status does not allow is refused with the key of its rule."""
    before = recorded()
    location = refused(act(staff, history[run], action=action, step_id="2", mode="discard"))
    key = {"cancel": "finished", "requeue": "not-running", "resolve": "not-blocked"}[action]
    assert location.endswith(f"?error={key}")
    assert recorded() == before


def test_oversized_and_overfull_posts_are_400(staff, history, settings):
    """A body over DATA_UPLOAD_MAX_MEMORY_SIZE or with too many fields is a 400."""
    # Django's own 400 page, as a production site shows it (DEBUG shows a traceback).
    settings.DEBUG = False
    before = recorded()
    big = {"action": "resolve", "step_id": "2", "mode": "result", "value": "1" * (3 << 20)}
    assert_clear(act(staff, history["blocked"], **big), 400)
    many = {f"field{i}": "x" for i in range(1_100)} | {"action": "cancel"}
    assert_clear(act(staff, history["scheduled"], **many), 400)
    assert recorded() == before


def test_post_body_that_is_not_utf8_is_refused_with_a_message(staff, history):
    """Form bytes that are not UTF-8 are read as U+FFFD and refused as any bad value."""
    before = recorded()
    body = b"action=resolve&step_id=%FF&mode=result&value=%FF%FE"
    response = staff.post(
        action_url(history["blocked"].id), body, content_type="application/x-www-form-urlencoded"
    )
    refused(response)
    assert recorded() == before


def test_a_nul_in_a_settled_result_round_trips(staff, history):
    """A JSON result holding a NUL settles the step; the run completes with it exactly."""
    run = history["blocked"]
    location = act(staff, run, action="resolve", step_id="2", mode="result", value='"a\\u0000b"')
    assert "done=resolve" in location["Location"]
    run_due()
    run.refresh_from_db()
    assert (run.status, serde.decode(run.result)) == ("completed", "a\x00b")
    html = assert_clear(staff.get(reverse("everystep:run", args=[run.id])), 200)
    assert "a\\\\u0000b" in html  # the stored form, shown as JSON


def test_a_settled_error_with_a_nul_is_stored_printable(staff, history):
    """An operator's error message with a NUL is stored with it spelled out."""
    run = history["blocked"]
    act(staff, run, action="resolve", step_id="2", mode="error", value="bank\x00down")
    step = Step.objects.get(workflow=run, step_id="2")
    assert step.status == "failed"
    assert step.error["message"] == "bank\\u0000down"
    assert stored_errors.decode_error(step.error).args[0] == "bank\x00down"


# --- big values on the run page ---------------------------------------------------------


def test_run_page_cuts_multi_megabyte_values(staff):
    """A run with 5 MB of arguments and a 5 MB step result: the page shows the first
    100,000 characters of each and says how to see the rest."""
    run = schedule(bad.big_args, "x" * (5 << 20))
    run_due()
    html = assert_clear(staff.get(reverse("everystep:run", args=[run.id])), 200)
    assert html.count("cut at 100,000 of 5,") == 2  # the arguments and the step's detail
    assert "everystep_show RUN_ID --json" in html
    assert len(html) < 500_000


@pytest.mark.backends("sqlite")
def test_a_legacy_row_with_a_lone_surrogate_is_shown_escaped(staff):
    """SQLite stored lone surrogates as they were before values were escaped: such a run
    page still renders (a response cannot encode them), spelling them out."""
    error = {"type": "builtins.ValueError", "message": "bad \udcff", "args": ["\udcff"]}
    run = Workflow.objects.create(name="legacy", args=["\udcff"], status="failed", error=error)
    html = assert_clear(staff.get(reverse("everystep:run", args=[run.id])), 200)
    assert "<code>builtins.ValueError</code>: bad \\udcff" in html
    assert "&quot;\\udcff&quot;" in html
