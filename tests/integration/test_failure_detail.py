"""Failure detail: the traceback stored with a failed step's or run's error, bounded and
printable, shown by the run page, ``everystep_show`` and the worker's log; where a
blocked or stopped run stopped; who settled a step instead of its duration; forks linked
both ways. On the database chosen by EVERYSTEP_TEST_DB."""

from __future__ import annotations

import io
import json
import logging
import re
from datetime import timedelta
from html import escape
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

import everystep
from everystep import schedule, step, stored_errors, workflow
from everystep.errors import Terminal
from everystep.failure_detail import MAX_BYTES
from everystep.logs import CONTINUATION, JsonFormatter
from everystep.models import Status, Step, Workflow
from everystep.testing import run_due
from tests.staff import staff_user

pytestmark = pytest.mark.django_db(transaction=True)


# --- workflows whose failures are inspected -----------------------------------------


@step
def charge_card(amount: int) -> int:
    raise ValueError(f"card declined for {amount}")


@workflow(name="failure_detail.checkout")
def checkout(amount: int) -> int:
    return charge_card(amount)


def _down(n: int) -> int:
    return _across(n + 1)


def _across(n: int) -> int:
    return _down(n + 1)  # two alternating frames: nothing for a repeat count to fold


@step
def recurse_forever() -> int:
    return _down(0)


@workflow(name="failure_detail.deep")
def deep() -> int:
    return recurse_forever()


@step
def shout(size: int) -> None:
    raise ValueError("x" * size)


@workflow(name="failure_detail.giant")
def giant(size: int) -> None:
    shout(size)


@step
def broken(message: str) -> None:
    raise RuntimeError(message)


@workflow(name="failure_detail.message")
def with_message(message: str) -> None:
    broken(message)


@workflow(name="failure_detail.caught_then_raised")
def caught_then_raised(amount: int) -> None:
    try:
        charge_card(amount)
    except ValueError as exc:
        caught = exc
    # The next pass replays the failure from its record and raises it as the outcome.
    everystep.sleep(timedelta(seconds=30))
    raise caught


@step
def refuse_order() -> None:
    raise Terminal("fraud suspected", {"score": 97})


@step
def reserve() -> int:
    return 1


@workflow(name="failure_detail.stopped_in_step")
def stopped_in_step() -> None:
    reserve()
    refuse_order(everystep_id="fraud")


@workflow(name="failure_detail.stopped_in_body")
def stopped_in_body() -> None:
    reserve()
    reserve(everystep_id="again")
    raise Terminal("nothing to do")


# --- helpers ---------------------------------------------------------------------------


def finished(run: Workflow) -> Workflow:
    run_due()
    run.refresh_from_db()
    return run


def first_step(run: Workflow) -> Step:
    return Step.objects.filter(workflow=run).order_by("started_at", "step_id").first()


def show(run: Workflow, *flags: str) -> str:
    out = io.StringIO()
    call_command("everystep_show", str(run.id), *flags, stdout=out)
    return out.getvalue()


def page(client: Any, run: Workflow) -> str:
    response = client.get(reverse("everystep:run", args=[run.id]))
    assert response.status_code == 200, response.status_code
    return response.content.decode()


@pytest.fixture
def staff(client: Any, django_user_model: Any) -> Any:
    client.force_login(staff_user(name="staff"))
    return client


# --- what is stored --------------------------------------------------------------------


def test_failed_step_and_run_store_the_users_frames():
    """A failed step's error and its run's error keep a traceback naming the user's
    frames and the error, with everystep's own frames left out."""
    run = finished(schedule(checkout, 12))
    assert run.status == Status.FAILED
    recorded = first_step(run).error
    assert recorded["type"] == "builtins.ValueError"
    for trace in (recorded["traceback"], run.error["traceback"]):
        assert "in charge_card" in trace
        assert 'raise ValueError(f"card declined for {amount}")' in trace
        assert trace.rstrip().endswith("ValueError: card declined for 12")
        assert "everystep/engine" not in trace
    # A step's failure raised on as the run's outcome keeps the recorded text, the same
    # on the live pass and on a replay (the step's id says where the body called it).
    assert run.error["traceback"] == recorded["traceback"]
    assert "of everystep" in run.error["traceback"]  # collapsed, and said so


def test_a_replayed_error_keeps_its_recorded_traceback():
    """An error served from its record and raised as the run's outcome on a later pass
    carries the recorded traceback, not a second one made of the replay's frames."""
    run = schedule(caught_then_raised, 5)
    run_due()
    run_due(advance=timedelta(minutes=1))
    run.refresh_from_db()
    assert run.status == Status.FAILED
    recorded = first_step(run).error
    assert run.error["traceback"] == recorded["traceback"]
    assert run.error["traceback"].count("Traceback (most recent call last)") == 1
    assert {key: run.error[key] for key in ("type", "message", "args")} == {
        key: recorded[key] for key in ("type", "message", "args")
    }


def test_deep_recursion_is_cut_to_its_end():
    """A recursion's traceback is cut to at most 64 KiB, keeping its end (the raising
    frame and the error) and saying it was cut."""
    run = finished(schedule(deep))
    trace = first_step(run).error["traceback"]
    assert len(trace.encode("utf-8")) <= MAX_BYTES
    assert trace.startswith("[traceback cut: its first ")
    assert trace.rstrip().endswith("RecursionError: maximum recursion depth exceeded")
    assert "in _across" in trace[-1000:] or "in _down" in trace[-1000:]
    assert len(run.error["traceback"].encode("utf-8")) <= MAX_BYTES


def test_a_giant_message_is_cut_in_the_traceback_not_the_frames():
    """A 200 kB message is cut in the traceback, whose raising frame stays."""
    run = finished(schedule(giant, 200_000))
    error = first_step(run).error
    assert len(error["traceback"].encode("utf-8")) <= MAX_BYTES
    assert 'raise ValueError("x" * size)' in error["traceback"]
    assert "[message cut: 200,0" in error["traceback"]


@step
def shout_at(text: str, *more: Any) -> None:
    raise LookupError(text, *more)


@workflow(name="failure_detail.caught")
def caught(size: int, bulky: bool) -> str:
    try:
        shout_at("é" * size, *([list(range(size))] if bulky else []))
    except LookupError as exc:
        return f"caught {type(exc).__name__}"
    except everystep.errors.StepFailure as exc:
        return f"caught {type(exc).__name__}: {str(exc)[:40]}"
    return "not raised"


def test_a_giant_message_and_args_are_stored_bounded_as_the_traceback_is():
    """A 2 MB message is cut to ``MAX_PART_BYTES`` in the step's record and the run's,
    and so are the args' strings: the exception keeps its type, so the body's
    ``except`` catches it alike on the live pass and on a replay. Args still too big (a
    list of 2 million ints) are not stored: both passes see a ``StepFailure``."""
    limit = stored_errors.MAX_PART_BYTES
    for bulky, expected in ((False, "caught LookupError"), (True, "caught StepFailure")):
        run = finished(schedule(caught, 1_000_000, bulky))
        assert run.status == Status.COMPLETED, run.error
        assert run.result.startswith(expected)
        error = first_step(run).error
        assert len(json.dumps(error["message"], ensure_ascii=False).encode()) <= limit
        assert re.search(r"… \[cut: [0-9,]{9,} characters\]$", error["message"])
        assert len(json.dumps(error["args"], ensure_ascii=False).encode()) <= limit
        assert (error["args"] is None) is bulky
        # A replay rebuilds what the live pass saw.
        replayed = stored_errors.decode_error(error)
        assert type(replayed).__name__ == expected.split()[-1].rstrip(":")


def test_unstorable_characters_never_reach_the_database():
    """A NUL and a lone surrogate in a message are stored escaped in the traceback."""
    run = finished(schedule(with_message, "bad\x00byte \ud800 here"))
    trace = first_step(run).error["traceback"]
    assert "bad\\u0000byte \\ud800 here" in trace
    assert "\x00" not in run.error["traceback"]


def test_stop_inside_a_step_records_the_step():
    """A run stopped by Terminal inside a step names that step; stopped in the body, the
    last recorded step is where it stopped."""
    in_step = finished(schedule(stopped_in_step))
    assert in_step.status == Status.STOPPED
    assert in_step.error["step_id"] == "fraud"
    in_body = finished(schedule(stopped_in_body))
    assert "step_id" not in in_body.error
    assert "stopped_at    step again" in show(in_body)
    assert "stopped_at    step fraud" in show(in_step)
    assert json.loads(show(in_step, "--json"))["stopped_at"] == "fraud"


# --- shown -----------------------------------------------------------------------------


def test_everystep_show_prints_the_tracebacks():
    """everystep_show prints the run's traceback indented after its error, the failed
    step's after the table, and --json carries both."""
    run = finished(schedule(checkout, 3))
    text = show(run)
    lines = text.splitlines()
    error_at = next(i for i, line in enumerate(lines) if line.startswith("error "))
    assert lines[error_at + 1] == " " * 14 + "Traceback (most recent call last):"
    assert "traceback of step 1:" in text
    assert "    Traceback (most recent call last):" in text.split("traceback of step 1:")[1]
    detail = json.loads(show(run, "--json"))
    assert detail["error"]["traceback"] == run.error["traceback"]
    assert detail["steps"][0]["error"]["traceback"] == first_step(run).error["traceback"]


def test_run_page_opens_the_run_traceback_and_folds_the_rest(staff):
    """The run page shows the run's traceback in an open <details> and the error's stored
    JSON (without the traceback) in a closed one; the failed step's traceback sits in its
    row, closed."""
    run = finished(schedule(checkout, 7))
    html = page(staff, run)
    run_trace = escape(run.error["traceback"], quote=True)
    assert (
        '<details class="es-traceback" open><summary>Traceback</summary>'
        f'<pre class="es-trace">{run_trace}</pre></details>'
    ) in html
    fields = re.search(
        r'<details class="es-error-fields"><summary>Stored error \(JSON\)</summary>'
        r'<pre class="es-json">(.*?)</pre></details>',
        html,
        re.DOTALL,
    )
    assert fields is not None, html
    assert "card declined for 7" in fields[1] and "traceback" not in fields[1]
    step_trace = escape(first_step(run).error["traceback"], quote=True)
    assert (
        '<summary>Traceback<span class="es-sr"> of step 1</span></summary>'
        f'<pre class="es-trace">{step_trace}</pre>'
    ) in html
    assert "Traceback (most recent call last):\\n" not in html  # not as escaped JSON


def test_run_page_says_where_a_run_stopped_or_is_blocked(staff):
    """A stopped run's page names the step it stopped at; a blocked run's the uncertain
    step."""
    stopped = finished(schedule(stopped_in_step))
    assert 'Stopped at</dt><dd>step <a href="#step-fraud"><code>fraud</code></a>' in page(
        staff, stopped
    )
    blocked = Workflow.objects.create(
        name="failure_detail.checkout",
        status=Status.BLOCKED,
        args=[1],
        error={"type": "everystep.errors.EffectUncertain", "message": "m", "step_id": "pay"},
    )
    assert 'Blocked at</dt><dd>step <a href="#step-pay"><code>pay</code></a>' in page(
        staff, blocked
    )


# --- logs ------------------------------------------------------------------------------


def finished_record(caplog: Any, run: Workflow) -> logging.LogRecord:
    with caplog.at_level(logging.INFO, logger="everystep.run"):
        run_due()
    return next(
        record
        for record in caplog.records
        if getattr(record, "event", "") == "run.failed" and record.run_id == str(run.id)
    )


def test_json_log_line_carries_the_traceback(caplog):
    """The JSON log line of a failed run has the traceback as a field of its own and a
    one-line message."""
    run = schedule(checkout, 9)
    line = json.loads(JsonFormatter().format(finished_record(caplog, run)))
    run.refresh_from_db()
    assert line["traceback"] == run.error["traceback"]
    assert line["message"] == (
        f"run {run.id} (failure_detail.checkout) failed: builtins.ValueError: card declined for 9"
    )


def test_text_log_lines_cannot_be_forged(caplog):
    """In the text log a failed run's traceback follows the message, every line behind a
    prefix, and a newline in the error's message cannot start a line of its own."""
    forged = "boom\n2030-01-01 00:00:00,000 INFO everystep.run run 1 (x) completed"
    run = schedule(with_message, forged)
    text = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s").format(
        finished_record(caplog, run)
    )
    first, *rest = text.split("\n")
    assert "boom\\n2030-01-01" in first
    assert rest and all(line.startswith(CONTINUATION) for line in rest)
    assert CONTINUATION + "Traceback (most recent call last):" in rest
    assert any("in broken" in line for line in rest)


# --- settled steps and forks -----------------------------------------------------------


def test_a_settled_step_says_who_settled_it_instead_of_a_duration(staff):
    """A step settled by an operator shows "settled by X at T" in place of a duration on
    the run page (table and timeline) and in everystep_show."""
    started = timezone.now() - timedelta(hours=3)
    run = Workflow.objects.create(name="wf.settled", status=Status.COMPLETED, args=[])
    Step.objects.create(
        workflow=run,
        step_id="1",
        name="wf.pay",
        status="done",
        result=1,
        started_at=started,
        finished_at=started + timedelta(hours=3),
        settled_by="alice (UI)",
    )
    html = page(staff, run)
    assert 'settled by alice (UI) at <time datetime="' in html
    assert '<td class="es-num">3 h 0 min</td>' not in html
    assert "<small>settled by alice (UI)</small>" in html  # the timeline's lane
    text = show(run)
    assert "settled by alice (UI) at " in text and "10800.000s" not in text
    step_json = json.loads(show(run, "--json"))["steps"][0]
    assert step_json["settled_by"] == "alice (UI)" and step_json["duration"] is None


def test_forks_are_linked_both_ways(staff):
    """The original's page and everystep_show list its forks; a fork's name the run it
    was forked from and the step."""
    original = Workflow.objects.create(name="wf.orig", status=Status.FAILED, args=[1])
    fork = Workflow.objects.create(
        name="wf.orig", args=[1], forked_from=original, forked_from_step="2"
    )
    fork_link = f'<a class="es-id" href="{reverse("everystep:run", args=[fork.id])}">{fork.id}</a>'
    assert "<dt>Forks</dt>" in page(staff, original) and fork_link in page(staff, original)
    origin_link = (
        f'<a class="es-id" href="{reverse("everystep:run", args=[original.id])}">{original.id}</a>'
    )
    fork_page = page(staff, fork)
    assert "<dt>Forked from</dt>" in fork_page and origin_link in fork_page
    assert "at step <code>2</code>" in fork_page
    assert f"forked_from   {original.id} wf.orig (failed) at step 2" in show(fork)
    assert f"  {fork.id}  scheduled  wf.orig" in show(original)
    detail = json.loads(show(original, "--json"))
    assert [f["id"] for f in detail["forks"]] == [str(fork.id)]
    assert json.loads(show(fork, "--json"))["forked_from"]["id"] == str(original.id)


def test_fork_form_only_for_final_runs_and_the_permission(staff, django_user_model):
    """The Fork form, posting action=fork and an optional from_step, is offered on a
    final run to a user with everystep.fork_workflow, and to nobody else."""
    failed = Workflow.objects.create(name="wf.f", status=Status.FAILED, args=[])
    running = Workflow.objects.create(name="wf.f", status=Status.RUNNING, args=[])
    form = '<input type="hidden" name="action" value="fork">'
    assert form not in page(staff, failed)
    user = django_user_model.objects.get(username="staff")
    user.user_permissions.add(Permission.objects.get(codename="fork_workflow"))
    html = page(staff, failed)
    assert form in html and 'name="from_step"' in html
    assert "From step (default: the first failed or unrecorded step)" in html
    assert form not in page(staff, running)
