"""``async def`` workflows and steps (issue 36), driven in this process by ``run_due``:
awaited steps recorded once and served on replay, concurrent awaits whose ids do not
depend on which finishes first, durable awaitable waits, composition, and the misuses
refused with a message saying what works."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from everystep import asend, schedule, send, step
from everystep.errors import EverystepError
from everystep.models import Status, Step, Workflow
from everystep.replays.check import check_replay
from everystep.store.audit import Actor
from everystep.store.runs import cancel_run
from everystep.testing import crash_at, run_due
from tests.testapp import async_workflows as aw
from tests.testapp.models import Execution
from tests.workers import worker_on_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes")]


def fresh(run: Workflow) -> Workflow:
    return Workflow.objects.get(id=run.id)


def rows(run: Workflow) -> list[tuple[str, str, str]]:
    return sorted(Step.objects.filter(workflow=run).values_list("step_id", "name", "status"))


def calls(run: Workflow, name: str) -> dict[Any, int]:
    return {arg: n for (rid, got, arg), n in aw.CALLS.items() if rid == str(run.id) and got == name}


def short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def test_awaited_steps_are_recorded_once_and_served_after_a_crash():
    """A crash after the second step's record: the resumed pass serves both recorded
    steps (their bodies ran once) and executes only the third."""
    run = schedule(aw.awaited_steps, 2)
    with crash_at("after_record", "2"):
        run_due()
    assert fresh(run).status == Status.RUNNING
    run_due()
    done = fresh(run)
    assert (done.status, done.result) == (Status.COMPLETED, 210)
    assert [(sid, short(name), status) for sid, name, status in rows(run)] == [
        ("1", "fetch", "done"),
        ("2", "sync_add", "done"),
        ("3", "fetch", "done"),
    ]
    assert calls(run, "fetch") == {2: 1, 21: 1}
    assert calls(run, "sync_add") == {(20, 1): 1}


def test_gathered_steps_then_a_durable_sleep_replay_without_running_again():
    """``asyncio.gather`` of steps finishing in reverse order, then ``asleep``: the run is
    released, and the pass after the sleep serves the gathered steps."""
    run = schedule(aw.gathered_then_sleep, 3, 60)
    run_due()
    waiting = fresh(run)
    assert waiting.status == Status.SCHEDULED and waiting.due_at is not None
    assert [sid for sid, _, _ in rows(run)] == ["1", "2", "3", "4"]
    run_due(advance=61)
    done = fresh(run)
    assert (done.status, done.result) == (Status.COMPLETED, [0, 10, 20, 1000])
    assert calls(run, "fetch") == {0: 1, 1: 1, 2: 1, 100: 1}


def test_gathered_branches_number_their_steps_in_a_scope_per_task():
    """Each coroutine awaited by ``gather`` is a task with a scope of its own, so its
    steps' ids do not depend on which branch got first to its next step."""
    run = schedule(aw.gathered_branches, 3)
    run_due()
    done = fresh(run)
    assert (done.status, done.result) == (Status.COMPLETED, [0, 11, 22])
    assert [(sid, short(name)) for sid, name, _ in rows(run)] == [
        ("1.0.1", "fetch"),
        ("1.0.2", "sync_add"),
        ("2.0.1", "fetch"),
        ("2.0.2", "sync_add"),
        ("3.0.1", "fetch"),
        ("3.0.2", "sync_add"),
    ]


def test_a_crash_in_a_branch_resumes_to_the_same_result_and_steps():
    """A crash after one branch's first record; the resumed run ends as an uninterrupted
    one, each body having run once (the crash struck after a record)."""
    reference = schedule(aw.gathered_branches, 3)
    run_due()
    run = schedule(aw.gathered_branches, 3)
    with crash_at("after_record", "2.0.1"):
        run_due()
    run_due()
    assert fresh(run).result == fresh(reference).result
    assert rows(run) == rows(reference)
    assert calls(run, "fetch") == {0: 1, 1: 1, 2: 1}


def test_a_task_group_of_branches_then_a_step():
    """``asyncio.TaskGroup`` branches get scopes as ``gather``'s do."""
    run = schedule(aw.task_group, 2)
    run_due()
    done = fresh(run)
    assert (done.status, done.result) == (Status.COMPLETED, [0, 11, 20])
    assert [sid for sid, _, _ in rows(run)] == ["1.0.1", "1.0.2", "2.0.1", "2.0.2", "3"]


def test_a_failing_async_step_is_recorded_and_caught_by_the_body():
    """The step's exception is recorded ``failed`` and raised into the body, which
    catches it; a replay re-raises the recorded one without running the step."""
    run = schedule(aw.catches_a_failure, 7)
    with crash_at("before_finish"):
        run_due()
    run_due()
    done = fresh(run)
    assert (done.status, done.result) == (Status.COMPLETED, "caught: card 7 declined")
    [(step_id, _, status)] = rows(run)
    assert (step_id, status) == ("1", "failed")
    assert calls(run, "declines") == {7: 1}


def test_await_for_takes_an_event_sent_with_send_and_asend():
    """``await_for`` releases the run until the event; ``send`` (or ``asend``) makes it
    due, and the payload reaches the body."""
    run = schedule(aw.waits_for_approval, 1)
    run_due()
    assert fresh(run).status == Status.SCHEDULED
    assert send(run.id, "approve", 5) is True
    run_due()
    assert (fresh(run).status, fresh(run).result) == (Status.COMPLETED, 6)
    other = schedule(aw.waits_for_approval, 2)
    run_due()
    assert asyncio.run(asend(other.id, "approve", 40)) is True
    run_due()
    assert fresh(other).result == 42


def test_astart_agather_and_aresult_inside_a_body_are_durable():
    """Children started with ``astart`` and awaited with ``agather``/``aresult``: the
    parent is released while they run, and completes with their results."""
    parent = schedule(aw.async_parent, 3)
    run_due()
    done = fresh(parent)
    assert (done.status, done.result) == (Status.COMPLETED, [1, 2, 3, 1])
    names = [short(name) for _, name, _ in rows(parent)]
    assert names == ["start", "start", "start", "gather", "result"]
    assert Workflow.objects.filter(parent_id=parent.id, status=Status.COMPLETED).count() == 3


def test_a_body_whose_path_depends_on_completion_order_fails_on_replay():
    """The order in which branches finished reaches a step's arguments: the replay
    finds the branches finishing in another order, and the run fails with
    ``WorkflowCodeError`` naming the step instead of serving the recorded result."""
    run = schedule(aw.completion_order, 3)
    run_due()
    assert fresh(run).status == Status.SCHEDULED, "released at the sleep"
    run_due(advance=1)
    failed = fresh(run)
    assert failed.status == Status.FAILED
    assert failed.error["type"] == "everystep.errors.WorkflowCodeError"
    assert "step 4 was recorded as" in failed.error["message"]
    assert "another order" in failed.error["message"]


@pytest.mark.parametrize(
    ("workflow", "message"),
    [
        (aw.uses_asyncio_wait, "asyncio.wait() and asyncio.as_completed() cannot wait"),
        (aw.forgets_await, "was called at step 1 and never awaited"),
        (aw.sync_calls_async_step, "is an async def, called from the sync workflow body"),
        (aw.async_calls_sync_sleep, "sleep() cannot be called in an async workflow body"),
        (aw.async_calls_parallel, "parallel() cannot be called in an async workflow body"),
        (aw.async_calls_patched, "patched() is not available in async workflow bodies"),
    ],
)
@pytest.mark.filterwarnings("ignore:coroutine 'operation' was never awaited")
def test_misuse_in_a_body_fails_the_run_saying_what_works(workflow, message):
    """Each misuse fails its run once, with a message naming what to use instead."""
    run = schedule(workflow, 2)
    run_due()
    failed = fresh(run)
    assert failed.status == Status.FAILED
    assert message in failed.error["message"]


def test_decorator_misuse_is_refused_at_decoration_time():
    """An atomic async step and a generator step are refused when decorated."""
    with pytest.raises(EverystepError, match="Django's transactions are sync only"):

        @step(atomic=True)
        async def books(n: int) -> int:
            return n

    with pytest.raises(EverystepError, match="generator function"):

        @step
        async def stream(n: int):  # type: ignore[no-untyped-def]
            yield n


def test_an_async_step_called_outside_a_run_is_a_plain_coroutine():
    """Outside a run a step is a plain call: an async step gives its coroutine."""
    assert asyncio.run(aw.fetch(3)) == 30


def test_the_replay_check_replays_async_bodies():
    """``everystep_check_replay``'s check replays an async run asleep after concurrent
    steps: nothing is written and it replays."""
    run = schedule(aw.gathered_then_sleep, 2, 3600)
    run_due()
    before = rows(run)
    report = check_replay()
    assert report.checked >= 1 and report.failing == 0
    assert rows(run) == before
    assert Execution.objects.filter(run_id=run.id).count() == 2


def test_an_embedded_worker_runs_async_runs_and_a_cancel_fences_the_one_in_flight():
    """``Worker`` on a thread of this process: async runs complete on its event loop; a
    run cancelled while its step awaits I/O records nothing more (the fence refuses the
    step's record) and starts no other step."""
    done = schedule(aw.awaited_steps, 5)
    held = schedule(aw.awaited_steps_slow, 1, 30.0)
    with worker_on_thread(name="async-embedded", pool_size=4) as worker:
        wait_until(lambda: fresh(done).status == Status.COMPLETED, "the first run")
        wait_until(
            lambda: Execution.objects.filter(run_id=held.id, step="fetch-11").exists(),
            "the second run's slow step",
        )
        cancel_run(str(held.id), actor=Actor("test", "test"), reason="stop it")
        aw.release_slow_io(held.id)
        wait_until(lambda: worker.worker.inflight == 0, "the cancelled run's pass to end")
    assert fresh(done).result == 510
    cancelled = fresh(held)
    assert cancelled.status == Status.CANCELLED
    assert [sid for sid, _, _ in rows(held)] == ["1"], "the slow step's record was refused"
    assert not Execution.objects.filter(run_id=held.id, step="fetch-111").exists()


def wait_until(predicate: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_wait_swallowed_by_gather_return_exceptions_still_releases_the_run():
    """A durable sleep whose ``Suspended`` ``gather(return_exceptions=True)`` hands to
    the body as a value: the run is released all the same, and completes after it."""
    run = schedule(aw.swallows_a_wait, 60)
    run_due()
    assert fresh(run).status == Status.SCHEDULED
    run_due(advance=61)
    done = fresh(run)
    assert (done.status, done.result) == (Status.COMPLETED, "returned early with 2 outcomes")
    assert calls(run, "fetch") == {7: 1}


def test_a_task_the_body_left_waiting_does_not_hold_the_pass():
    """A task the body created and never awaited, waiting on something else than an
    operation when the body returns, is cancelled: the run completes at once."""
    run = schedule(aw.leaves_a_task_behind, 4)
    run_due()
    done = fresh(run)
    assert (done.status, done.result) == (Status.COMPLETED, 40)
    assert calls(run, "fetch") == {4: 1}


def test_the_replay_check_reports_a_step_now_called_with_other_arguments():
    """A deploy that changes what an async body passes to a recorded step: the replay
    check reports the run (it compares arguments as the worker's replay does)."""
    from everystep import asleep
    from everystep.testing import deployed

    run = schedule(aw.gathered_then_sleep, 2, 3600)
    run_due()

    async def changed(count: int, seconds: float) -> list[int]:
        values = await asyncio.gather(*(aw.fetch(n + 1) for n in range(count)))
        await asleep(seconds)
        return [*values, await aw.fetch(100)]

    with deployed(aw.gathered_then_sleep, changed):
        report = check_replay()
    assert report.failing == 1
    [failure] = report.workflows[run.name].failures
    assert failure.run_id == run.id and failure.step_id == "1"
    assert "other arguments" in failure.reason


@pytest.mark.backends("postgres")
def test_a_broken_connection_of_the_async_orm_thread_fails_one_step_not_every_one():
    """The server ends the session of the thread Django's async ORM uses in a worker:
    the step that meets it fails, and the next run's step reconnects (Django closes
    such a connection only between requests; that thread serves none)."""
    from tests import pgadmin

    first = schedule(aw.async_orm_probe, 1)
    with worker_on_thread(name="async-orm", pool_size=2):
        wait_until(lambda: fresh(first).status == Status.COMPLETED, "the first run")
        pgadmin.execute("SELECT pg_terminate_backend(%s)", [fresh(first).result])
        second = schedule(aw.async_orm_probe, 2)
        wait_until(lambda: fresh(second).status in FINAL, "the second run")
        third = schedule(aw.async_orm_probe, 3)
        wait_until(lambda: fresh(third).status in FINAL, "the third run")
    assert fresh(second).status == Status.FAILED
    assert "OperationalError" in fresh(second).error["type"]
    assert fresh(third).status == Status.COMPLETED
    assert fresh(third).result != fresh(first).result, "a new session"


FINAL = {Status.COMPLETED, Status.FAILED}
