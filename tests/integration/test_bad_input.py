"""Bad input to schedule() and from step bodies, on every database: text no database
stores as is (NUL, lone surrogates), values nested too deep, multi-megabyte arguments
and results, and BaseExceptions raised by steps."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from everystep import registry, schedule, serde, stored_errors, workflow
from everystep.engine.execute import run_pass
from everystep.errors import EverystepError
from everystep.models import Step, Workflow
from everystep.store.claims import claim_due
from everystep.testing import run_due
from tests.testapp import bad_workflows as bad
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)

FIVE_MB = 5 * 1024 * 1024


def recorded() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every run and step row with every column: what refused input must leave as is."""
    runs = list(Workflow.objects.order_by("id").values_list())
    steps = list(Step.objects.order_by("id").values_list())
    return runs, steps


@pytest.fixture
def history() -> None:
    """A completed and a failed run, so that "nothing changed" has something to keep."""
    schedule(wf.sequential, 1, 2)
    schedule(wf.failing)
    run_due()


def run_due_on_a_pool_thread() -> None:
    """``run_due()`` on a thread that is not the main one, as a worker runs its passes."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            run_due()
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(120)
    assert not errors, errors


def steps_of(run: Workflow) -> dict[str, tuple[str, Any, Any]]:
    rows = Step.objects.filter(workflow=run).values_list("step_id", "status", "result", "error")
    return {step_id: (status, result, error) for step_id, status, result, error in rows}


# --- text no database stores as is -----------------------------------------------------


UNSTORABLE = [
    "name\x00with nul",
    "\x00",
    "\udcff-not-utf-8",
    {"key\x00": ["\x00", "\ud800"], "plain": "é"},
]


@pytest.mark.parametrize("value", UNSTORABLE, ids=["nul", "only-nul", "surrogate", "dict"])
def test_unstorable_text_round_trips_through_a_run(value):
    """NUL and lone surrogates in arguments and step results are stored and come back
    exactly, on every database (PostgreSQL refused them with a DataError)."""
    run = schedule(bad.echo_back, value)
    assert serde.decode(Workflow.objects.get(id=run.id).args) == [value]
    run_due()
    run.refresh_from_db()
    assert run.status == "completed", run.error
    assert serde.decode(run.result) == {"arg": value, "step": value}
    ((status, result, _),) = steps_of(run).values()
    assert status == "done" and serde.decode(result) == value


def test_step_error_with_nul_is_recorded_and_replayed():
    """A step raising with a NUL in its message fails the run with a readable message;
    the recorded error rebuilds the exception with its exact arguments."""
    run = schedule(bad.fails_with, "bad\x00byte")
    run_due()
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error["type"] == "builtins.ValueError"
    assert "\\x00" in run.error["message"]  # spelled out, not SQL text
    ((status, _, error),) = steps_of(run).values()
    assert status == "failed"
    assert stored_errors.decode_error(error).args == ("bad\x00byte", "second arg")


@pytest.mark.parametrize("key", ["key\x00", "\udcff"])
def test_unstorable_idempotency_key_is_refused_before_writing(history, key):
    """An idempotency key with NUL or a lone surrogate is an EverystepError naming it."""
    before = recorded()
    with pytest.raises(EverystepError, match=r"idempotency_key of workflow .* at position"):
        schedule(wf.sequential, 1, 2, idempotency_key=key)
    assert recorded() == before


@pytest.mark.parametrize(
    "name, message",
    [
        ("orders\x00fulfil", "contains \\\\u0000 at position 6: a NUL character"),
        ("x" * 256, "is 256 characters; runs and steps store names of at most 255"),
    ],
)
def test_workflow_name_no_database_stores_is_refused_at_decoration(name, message):
    """@workflow(name=...) with a NUL or longer than the column is refused at once, not by
    one database at the first schedule; nothing is registered."""

    def flow() -> None: ...

    with pytest.raises(EverystepError, match=message):
        workflow(name=name)(flow)
    assert registry.lookup(name) is None


# --- nesting ------------------------------------------------------------------------


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def test_arguments_nested_too_deep_are_refused_before_writing(history):
    """Arguments nesting deeper than MariaDB stores are refused on every database."""
    before = recorded()
    with pytest.raises(EverystepError, match=r"arguments of workflow .*more than 31 levels"):
        schedule(bad.echo_back, deep(serde.MAX_DEPTH))  # plus the argument list: 32
    assert recorded() == before


def test_step_result_nested_too_deep_fails_the_step_and_the_run():
    """A step returning a value nested too deep fails with a message naming the step."""
    run = schedule(bad.deep_result, 40)
    run_due()
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error["type"] == "everystep.errors.EverystepError"
    assert "result of step 1" in run.error["message"]
    assert "more than 31 levels" in run.error["message"]
    assert [status for status, _, _ in steps_of(run).values()] == ["failed"]


# --- big values ---------------------------------------------------------------------


def test_five_megabytes_of_arguments_are_stored_and_run():
    """A run scheduled with 5 MB of arguments runs to completion on every database."""
    run = schedule(bad.big_args, "x" * FIVE_MB)
    run_due()
    run.refresh_from_db()
    assert (run.status, run.result) == ("completed", FIVE_MB)
    assert len(run.args[0]) == FIVE_MB


def test_a_step_returning_five_megabytes_is_recorded_and_served():
    """A step's 5 MB result is recorded, and the body receives it."""
    run = schedule(bad.big_result, FIVE_MB)
    run_due()
    run.refresh_from_db()
    assert (run.status, run.result) == ("completed", FIVE_MB)
    ((status, result, _),) = steps_of(run).values()
    assert status == "done" and len(result) == FIVE_MB


def packet_limit() -> int:
    """The MariaDB server's max_allowed_packet, in bytes."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@max_allowed_packet")
        return int(cursor.fetchone()[0])


@pytest.mark.backends("mariadb")
def test_arguments_over_the_packet_limit_are_an_everystep_error(history):
    """Arguments bigger than MariaDB's max_allowed_packet are a clear EverystepError (not
    a raw OperationalError); nothing is written and the next schedule works."""
    before = recorded()
    with pytest.raises(EverystepError, match=r"cannot schedule .*max_allowed_packet"):
        schedule(bad.big_args, "x" * (packet_limit() + 1024))
    assert recorded() == before
    assert schedule(bad.big_args, "small").status == "scheduled"


@pytest.mark.backends("mariadb")
def test_a_result_over_the_packet_limit_fails_the_run_instead_of_retrying(history):
    """A step result bigger than max_allowed_packet is not a database outage: the pass
    fails the run with a message saying why, instead of retrying (and re-running the
    step) forever."""
    run = schedule(bad.big_result, packet_limit() + 1024)
    (claim,) = claim_due("big", 1)
    assert run_pass(claim).status == "failed"
    run.refresh_from_db()
    assert run.error["type"] == "everystep.errors.EverystepError"
    assert "max_allowed_packet" in run.error["message"]
    assert not Step.objects.filter(workflow=run).exists()


# --- BaseException from a step body --------------------------------------------------


@pytest.mark.parametrize("kind", sorted(bad.BASE_EXCEPTIONS))
def test_base_exception_from_a_step_fails_the_step_and_the_run(kind):
    """SystemExit, KeyboardInterrupt or a custom BaseException raised by a step (on a
    worker's pool thread) is recorded as the step's failure and fails the run with a
    StepFailure naming it; nothing after it runs."""
    run = schedule(bad.raises_base, kind)
    run_due_on_a_pool_thread()
    run.refresh_from_db()
    qualified = serde.qualified_name(bad.BASE_EXCEPTIONS[kind])
    assert (run.status, run.claimed_by) == ("failed", "everystep-testing")
    assert run.error["type"] == "everystep.errors.StepFailure"
    assert run.error["message"] == f"{qualified}: 3"
    recorded_steps = steps_of(run)
    assert sorted(recorded_steps) == ["1", "2"]
    assert recorded_steps["2"][0] == "failed"
    assert recorded_steps["2"][2]["type"] == qualified


@pytest.mark.parametrize("kind", ["SystemExit", "Abort"])
def test_base_exception_on_the_main_thread_is_recorded_too(kind):
    """On the main thread (run_due() in a test) SystemExit and custom BaseExceptions are
    recorded the same way."""
    run = schedule(bad.raises_base, kind)
    run_due()
    run.refresh_from_db()
    assert run.status == "failed"
    assert steps_of(run)["2"][0] == "failed"


def test_ctrl_c_on_the_main_thread_interrupts_and_records_nothing():
    """A KeyboardInterrupt on the main thread is Ctrl-C: it stops run_due(), the step is
    not recorded, the run stays running and is resumed later."""
    run = schedule(bad.raises_base, "KeyboardInterrupt")
    with pytest.raises(KeyboardInterrupt):
        run_due()
    run.refresh_from_db()
    assert run.status == "running"
    assert sorted(steps_of(run)) == ["1"]
    run_due_on_a_pool_thread()  # resumed by the same runner's catchup
    run.refresh_from_db()
    assert run.status == "failed"


def test_body_sees_the_same_step_failure_live_and_on_replay():
    """The body catches a StepFailure where the step raised SystemExit, on the live pass
    and again on a replay, with the same message."""
    run = schedule(bad.catches_base, "SystemExit")
    run_due_on_a_pool_thread()
    run.refresh_from_db()
    assert (run.status, run.result) == ("completed", "caught: builtins.SystemExit: 3")
    Workflow.objects.filter(id=run.id).update(status="scheduled", result=None)
    steps_before = recorded()[1]
    run_due_on_a_pool_thread()
    run.refresh_from_db()
    assert (run.status, run.result) == ("completed", "caught: builtins.SystemExit: 3")
    assert recorded()[1] == steps_before, "the replay served both steps"


def test_generator_exit_from_a_step_is_left_alone():
    """GeneratorExit (closing a generator) is not an outcome: it unwinds the pass and
    nothing is recorded for the step."""

    run = schedule(bad.raises_base, "GeneratorExit")
    (claim,) = claim_due("closer", 1)
    with pytest.raises(GeneratorExit):
        run_pass(claim)
    run.refresh_from_db()
    assert run.status == "running"
    assert sorted(steps_of(run)) == ["1"]


def test_a_stop_reason_holding_a_nul_is_stored_printable():
    """A Terminal reason is shown, never rebuilt: stored escaped, the payload exactly."""
    run = schedule(bad.stops_with, "card\x00expired")
    run_due()
    run.refresh_from_db()
    assert run.status == "stopped"
    assert run.error["reason"] == "card\\u0000expired"
    assert serde.decode(run.error["payload"]) == {"why": "card\x00expired"}


def test_a_step_name_holding_a_nul_fails_the_run_with_a_clear_error(history):
    """An everystep_id is stored and matched as it is: refused on every database."""
    before = recorded()
    run = schedule(bad.named_step, "a\x00b")
    run_due()
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error["type"] == "everystep.errors.EverystepError"
    assert "NUL character" in run.error["message"]
    assert not Step.objects.filter(workflow=run).exists()
    assert recorded()[1] == before[1], "no step row changed"
