"""Holes found in the worker and closed: a heartbeat thread that must not die or hang
unseen, outcomes and requeues that all go through one reported path, and a ``run()``
that leaves no thread of its own behind."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from everystep import schedule, signals
from everystep.engine import execute
from everystep.models import Runner, Step, Workflow
from everystep.store import runners
from everystep.store.claims import claim_due
from everystep.store.outcome import requeue_run
from everystep.testing import run_due
from everystep.worker import loop
from everystep.worker.heartbeat import Heartbeat
from tests.acceptance.conftest import free_port, http_get
from tests.integration.test_worker_embedded import all_final, wait_for
from tests.testapp import workflows as wf
from tests.workers import worker_on_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("pooler")]


@pytest.fixture
def received() -> Iterator[dict[str, list[dict[str, Any]]]]:
    """What ``run_finished`` and ``run_requeued`` carried during the test."""
    seen: dict[str, list[dict[str, Any]]] = {"finished": [], "requeued": []}

    def finished(sender: Any, **kw: Any) -> None:
        seen["finished"].append(kw)

    def requeued(sender: Any, **kw: Any) -> None:
        seen["requeued"].append(kw)

    signals.run_finished.connect(finished, dispatch_uid="test.finished")
    signals.run_requeued.connect(requeued, dispatch_uid="test.requeued")
    yield seen
    signals.run_finished.disconnect(dispatch_uid="test.finished")
    signals.run_requeued.disconnect(dispatch_uid="test.requeued")


def test_heartbeat_survives_an_unexpected_error(monkeypatch, caplog):
    """An error that is not a database error is logged and the thread keeps beating."""
    failures = {"left": 3}
    real = runners.beat

    def flaky(*args: Any, **kwargs: Any) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("a bug in a heartbeat receiver")
        real(*args, **kwargs)

    caplog.set_level(logging.ERROR, logger="everystep.worker")
    with worker_on_thread(name="steady"):
        monkeypatch.setattr(runners, "beat", flaky)
        first = Runner.objects.get(name="steady").last_seen
        wait_for(lambda: failures["left"] == 0)
        wait_for(lambda: Runner.objects.get(name="steady").last_seen > first)
    logged = [r for r in caplog.records if "heartbeat failed unexpectedly" in r.getMessage()]
    assert len(logged) == 3
    assert all(r.exc_info and r.exc_info[0] is RuntimeError for r in logged)


def test_liveness_fails_when_heartbeats_stop(monkeypatch):
    """A heartbeat thread that hangs fails /healthz, though the claim loop still ticks."""
    hang, release = threading.Event(), threading.Event()
    real = Heartbeat._tick

    def maybe_hang(self: Heartbeat) -> None:
        if hang.is_set():
            release.wait(60)
        real(self)

    monkeypatch.setattr(Heartbeat, "_tick", maybe_hang)
    port = free_port()
    with worker_on_thread(
        name="silent",
        metrics_port=port,
        metrics_bind="127.0.0.1",
        notify=False,  # the loop then ticks every poll, well within the limit
        liveness_timeout=0.5,
    ):
        # Released before the block ends: the worker's stop joins the heartbeat thread.
        try:
            wait_for(lambda: http_get(port, "/healthz")[0] == 200)
            hang.set()
            wait_for(lambda: http_get(port, "/healthz")[0] == 503)
            body = json.loads(http_get(port, "/healthz")[1])
            assert body["last_heartbeat_age_seconds"] > body["heartbeat_limit_seconds"]
            assert body["last_tick_age_seconds"] <= body["limit_seconds"], "the loop still ticks"
            hang.clear()
            release.set()
            wait_for(lambda: http_get(port, "/healthz")[0] == 200)
        finally:
            release.set()


def test_a_crashed_run_is_reported_like_any_outcome(monkeypatch, received):
    """A pass that crashes outside the engine sends run_finished (logs, metrics, Sentry)."""
    doomed = schedule(wf.named)
    real = execute.registry.lookup

    def broken(name: str) -> Any:
        if name == doomed.name:
            raise RuntimeError("engine bug while looking the workflow up")
        return real(name)

    monkeypatch.setattr(execute.registry, "lookup", broken)
    with worker_on_thread(name="crashy"):
        wait_for(all_final)
    doomed.refresh_from_db()
    assert doomed.status == "failed"
    (report,) = [kw for kw in received["finished"] if kw["run_id"] == doomed.id]
    assert report["status"] == "failed"
    assert report["workflow"] == doomed.name
    assert isinstance(report["exc"], RuntimeError)
    assert report["error"]["type"] == "builtins.RuntimeError"


def test_an_orphan_requeue_is_reported(received):
    """Runs taken from a silent runner send run_requeued naming the dead runner."""
    run = schedule(wf.sequential, 1, 1)
    Workflow.objects.filter(id=run.id).update(
        status="running", claimed_by="ghost", claim_token=uuid.uuid4()
    )
    long_ago = timezone.now() - timedelta(hours=1)
    Runner.objects.create(
        name="ghost", boot_id=uuid.uuid4(), pool_size=1, started_at=long_ago, last_seen=long_ago
    )
    with worker_on_thread(name="sweeper", orphan_timeout=1.0):
        wait_for(all_final)
    run.refresh_from_db()
    assert run.status == "completed"
    (report,) = [kw for kw in received["requeued"] if kw["run_id"] == run.id]
    assert report["dead_runner"] == "ghost"
    assert report["runner"] == "sweeper"
    assert "ghost" in report["reason"]


def test_run_returns_with_no_thread_of_its_own_left():
    """After run() returns, the heartbeat, listener (PostgreSQL), probe server and pool
    threads are all gone."""
    before = set(threading.enumerate())
    runs = [schedule(wf.sequential, i, 1) for i in range(3)]
    with worker_on_thread(
        pool_size=2, name="tidy", metrics_port=free_port(), metrics_bind="127.0.0.1"
    ):
        wait_for(all_final)
    assert all(Workflow.objects.get(id=r.id).status == "completed" for r in runs)
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert left == []


def park(run: Workflow, runner: str, recoveries: int) -> None:
    """Leave ``run`` as a worker named ``runner`` that died holding it would."""
    Workflow.objects.filter(id=run.id).update(
        status="running", claimed_by=runner, claim_token=uuid.uuid4(), recoveries=recoveries
    )


def test_a_run_that_keeps_killing_its_worker_is_failed(settings):
    """Past EVERYSTEP_MAX_RECOVERIES the run is failed with a clear error, not resumed."""
    settings.EVERYSTEP_MAX_RECOVERIES = 3
    looping, last_chance = schedule(wf.sequential, 1, 1), schedule(wf.sequential, 2, 2)
    park(looping, "testing", 3)  # the restart below is its 4th recovery
    park(last_chance, "testing", 2)  # its 3rd: still allowed
    run_due(runner="testing")
    looping.refresh_from_db()
    last_chance.refresh_from_db()
    assert (looping.status, looping.recoveries) == ("failed", 4)
    assert looping.error["type"] == "everystep.errors.TooManyRecoveries"
    assert "taken back from a dead worker 4 times" in looping.error["message"]
    assert not looping.steps.exists(), "nothing ran"
    assert (last_chance.status, last_chance.recoveries) == ("completed", 3)


def test_orphan_recovery_counts_and_a_drain_does_not(settings):
    """Taking a run from a silent runner counts; the drain's requeue does not."""
    run = schedule(wf.sequential, 1, 1)
    park(run, "ghost", 0)
    long_ago = timezone.now() - timedelta(hours=1)
    Runner.objects.create(
        name="ghost", boot_id=uuid.uuid4(), pool_size=1, started_at=long_ago, last_seen=long_ago
    )
    assert [row[0] for row in runners.requeue_orphans(60)] == [run.id]
    run.refresh_from_db()
    assert (run.status, run.recoveries) == ("scheduled", 1)
    (held,) = claim_due("w", 1)
    assert held.recoveries == 1
    assert requeue_run(held)
    run.refresh_from_db()
    assert (run.status, run.recoveries) == ("scheduled", 1)


def test_max_recoveries_zero_means_no_limit(settings):
    settings.EVERYSTEP_MAX_RECOVERIES = 0
    run = schedule(wf.sequential, 1, 1)
    park(run, "testing", 1000)
    run_due(runner="testing")
    run.refresh_from_db()
    assert run.status == "completed"


@pytest.mark.backends("postgres", "mariadb")
def test_an_orphan_sweep_skips_runs_another_sweeper_holds():
    """A sweeper paused inside its transaction (SIGSTOP) must not stall the others: they
    skip the rows it holds instead of waiting for them (found by bench/chaos.py)."""
    held, free = schedule(wf.sequential, 1, 1), schedule(wf.sequential, 2, 2)
    park(held, "ghost", 0)
    park(free, "ghost", 0)
    long_ago = timezone.now() - timedelta(hours=1)
    Runner.objects.create(
        name="ghost", boot_id=uuid.uuid4(), pool_size=1, started_at=long_ago, last_seen=long_ago
    )
    locked, release = threading.Event(), threading.Event()

    def paused_sweeper() -> None:
        from django.db import connection, transaction

        try:
            with transaction.atomic():
                list(Workflow.objects.select_for_update().filter(id=held.id).values("id"))
                locked.set()
                release.wait(60)
        finally:
            connection.close()

    other = threading.Thread(target=paused_sweeper)
    other.start()
    try:
        assert locked.wait(30)
        started = time.monotonic()
        swept = runners.requeue_orphans(60)
        assert time.monotonic() - started < 5, "the sweep waited for the held row"
        assert [row[0] for row in swept] == [free.id]
    finally:
        release.set()
        other.join(60)
    assert Workflow.objects.get(id=held.id).status == "running"
    assert [row[0] for row in runners.requeue_orphans(60)] == [held.id], "taken once free"


def test_a_pass_that_finds_its_step_already_recorded_requeues_the_run():
    """Records the pass did not know of (an earlier pass's) must not strand the run
    under a live worker: it is requeued, and a fresh pass serves the record."""
    from everystep.engine.execute import run_pass

    run = schedule(wf.sequential, 1, 2)
    (held,) = claim_due("w", 1)
    assert held.fresh, "the pass will not load the steps"
    now = timezone.now()
    Step.objects.create(
        workflow_id=run.id,
        step_id="1",
        name="tests.testapp.workflows.add",
        args=[1, 2],
        status="done",
        result=100,
        started_at=now,
        finished_at=now,
    )
    assert run_pass(held).status == "requeued"
    run.refresh_from_db()
    assert (run.status, run.claimed_by) == ("scheduled", None)
    run_due()
    run.refresh_from_db()
    assert run.status == "completed"
    assert run.result["total"] == 100, "the recorded outcome is served"
    assert Step.objects.filter(workflow=run).count() == 4


@pytest.mark.parametrize(
    "name, value, check_id",
    [
        ("EVERYSTEP_MAX_RECOVERIES", -1, "everystep.E004"),
        ("EVERYSTEP_MAX_RECOVERIES", True, "everystep.E004"),
        ("EVERYSTEP_FORK_THREADS", 0, "everystep.E001"),
    ],
)
def test_invalid_count_settings_are_reported_and_fall_back(settings, name, value, check_id):
    from everystep import conf
    from everystep.checks import check_settings

    setattr(settings, name, value)
    (error,) = check_settings()
    assert error.id == check_id and name in error.msg
    assert conf.count_setting(name) == (conf.DEFAULTS[name], False)


def test_a_claim_whose_reply_was_lost_is_taken_back(monkeypatch, caplog):
    """A claim that commits on the server but whose reply is lost with the connection (a
    server restart at the wrong moment): the worker does not know it holds the run, and
    its live heartbeat keeps orphan recovery away. It takes the run back on its next tick
    and runs it, without counting a recovery."""
    from django.db import OperationalError

    run = schedule(wf.sequential, 1, 2)
    real = loop.claim_due
    lost: list[Any] = []

    def reply_lost(runner: str, limit: int, carrying: Any = None) -> Any:
        claims = real(runner, limit, carrying)
        if claims and not lost:
            lost.extend(claims)
            raise OperationalError("Lost connection to server during query (injected)")
        return claims

    monkeypatch.setattr(loop, "claim_due", reply_lost)
    caplog.set_level(logging.WARNING, logger="everystep.worker")
    with worker_on_thread(name="unlucky"):
        wait_for(all_final, 30)
    assert [held.run_id for held in lost] == [run.id], "the claim took the run, then failed"
    run.refresh_from_db()
    assert (run.status, run.claimed_by, run.recoveries) == ("completed", "unlucky", 0)
    assert Step.objects.filter(workflow=run).count() == 4
    assert any("takes back 1 run(s)" in r.getMessage() for r in caplog.records)
