"""The worker as operators run it: real subprocesses, real signals, a real database."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import defaultdict

import pytest
from django.db import DatabaseError, connections
from django.db.models import Count, Max, Min

from everystep import schedule
from everystep.models import Runner, Step, Workflow
from tests.acceptance.conftest import database_server, wait_until
from tests.testapp import workflows as wf
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.tiers("modes", "pooler")]

FAST = ("--poll", "0.05")


def status_of(run: Workflow) -> str:
    run.refresh_from_db()
    return run.status


def started(run: Workflow, label: str) -> bool:
    return Execution.objects.filter(run_id=run.id, step=label).exists()


def max_overlap(intervals: list[tuple[object, object]]) -> int:
    events = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
        key=lambda event: (event[0], event[1]),
    )
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


@pytest.mark.tiers("several")
def test_three_workers_share_300_runs_exclusively(workers):
    """3 workers x 300 runs: all complete, no step twice, no run in two workers, pool bound."""
    runs = [schedule(wf.three_steps, i) for i in range(300)]
    procs = [workers(f"crew-{i}", "--pool", "4", *FAST) for i in range(3)]
    wait_until(
        lambda: Workflow.objects.filter(status="completed").count() == len(runs),
        400,
        "300 completed runs",
    )
    for proc in procs:
        proc.signal(signal.SIGTERM)
    assert [proc.wait(60) for proc in procs] == [0, 0, 0]

    assert Step.objects.count() == 900
    per_run = Step.objects.values("workflow").annotate(n=Count("id"))
    assert {row["n"] for row in per_run} == {3}
    # Every step body ran exactly once, and all steps of a run in one process.
    assert Execution.objects.count() == 900
    pids = Execution.objects.values("run_id").annotate(n=Count("pid", distinct=True))
    assert {row["n"] for row in pids} == {1}
    assert set(Execution.objects.values_list("pid", flat=True)) <= {p.pid for p in procs}
    # The runs each worker held never exceeded --pool at any moment.
    spans = Step.objects.values("workflow", "workflow__claimed_by").annotate(
        start=Min("started_at"), end=Max("finished_at")
    )
    by_runner: dict[str, list[tuple[object, object]]] = defaultdict(list)
    for row in spans:
        by_runner[row["workflow__claimed_by"]].append((row["start"], row["end"]))
    assert set(by_runner) <= {"crew-0", "crew-1", "crew-2"}
    assert all(max_overlap(spans) <= 4 for spans in by_runner.values())
    assert not Workflow.objects.filter(status="running").exists()
    assert not Runner.objects.exists(), "a clean shutdown removes the heartbeat row"


@pytest.mark.tiers("several")
def test_sigterm_finishes_the_step_then_requeues(workers):
    """SIGTERM mid-step: the step is recorded, the run requeued, the worker exits 0."""
    run = schedule(wf.slow, 3)
    first = workers("drainer", "--drain", "60", *FAST)
    wait_until(lambda: started(run, "long"), 60, "the long step to start")
    first.signal(signal.SIGTERM)
    assert first.wait(90) == 0
    run.refresh_from_db()
    assert (run.status, run.claimed_by, run.claim_token) == ("scheduled", None, None)
    recorded = dict(Step.objects.filter(workflow=run).values_list("step_id", "status"))
    assert recorded == {"1": "done", "2": "done"}
    assert not started(run, "last"), "no new step starts while draining"

    second = workers("finisher", *FAST)
    wait_until(lambda: status_of(run) == "completed", 60, "the run to complete")
    assert run.claimed_by == "finisher"
    assert Execution.objects.filter(run_id=run.id, step="long").count() == 1
    second.signal(signal.SIGTERM)
    assert second.wait(60) == 0


def test_drain_deadline_requeues_a_step_still_running(workers):
    """A step longer than --drain: the run is requeued at the deadline and the worker exits 0."""
    run = schedule(wf.slow, 120)
    proc = workers("hasty", "--drain", "1", *FAST)
    wait_until(lambda: started(run, "long"), 60, "the long step to start")
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    run.refresh_from_db()
    assert (run.status, run.claimed_by) == ("scheduled", None)
    assert list(Step.objects.filter(workflow=run).values_list("step_id", flat=True)) == ["1"]
    assert "still executing at the drain deadline" in proc.log()


def test_the_drain_deadline_holds_while_an_atomic_step_locks_its_run(workers, tmp_path):
    """An atomic step still running at the drain deadline holds its run row's lock in its
    transaction. Requeueing that run waited for the lock: on PostgreSQL until the step
    ended, on MariaDB for innodb_lock_wait_timeout (50 s), on SQLite for the connection's
    timeout (30 s here), so the worker overran its drain by that much. The requeue now
    gives up within seconds: the run stays with the runner's name, for a restart under
    that name or for orphan recovery."""
    marker = tmp_path / "began"
    run = schedule(wf.atomic_hold, str(marker), 45)
    proc = workers("holder", "--drain", "1", *FAST)
    wait_until(marker.exists, 60, "the atomic step to begin")
    began = time.monotonic()
    proc.signal(signal.SIGTERM)
    assert proc.wait(40) == 0
    assert time.monotonic() - began < 25, "the worker overran its drain deadline"
    run.refresh_from_db()
    assert (run.status, run.claimed_by) == ("running", "holder")
    assert not Step.objects.filter(workflow=run).exists()
    assert "could not be requeued" in proc.log()


def test_sigkill_then_restart_under_the_same_name_resumes(workers):
    """SIGKILL leaves the run parked under the name; a restart with that name completes it."""
    run = schedule(wf.slow, 1)
    proc = workers("phoenix", "--orphan-timeout", "0", *FAST)
    wait_until(lambda: started(run, "long"), 60, "the long step to start")
    proc.signal(signal.SIGKILL)
    proc.wait(30)
    run.refresh_from_db()
    assert (run.status, run.claimed_by) == ("running", "phoenix")
    again = workers("phoenix", "--orphan-timeout", "0", *FAST)
    wait_until(lambda: status_of(run) == "completed", 60, "the run to complete")
    assert "resumes 1 run(s) parked under its name" in again.log()
    assert Execution.objects.filter(run_id=run.id, step="first").count() == 1
    assert Step.objects.filter(workflow=run).count() == 3
    again.signal(signal.SIGTERM)
    assert again.wait(60) == 0


def test_dead_runner_runs_are_taken_over_after_heartbeat_timeout(workers):
    """A killed runner's runs are requeued by a live worker once its heartbeat expires."""
    run = schedule(wf.slow, 1)
    doomed = workers("doomed", "--heartbeat", "0.2", "--orphan-timeout", "0", *FAST)
    wait_until(lambda: started(run, "long"), 60, "the long step to start")
    doomed.signal(signal.SIGKILL)
    doomed.wait(30)
    rescuer = workers("rescuer", "--heartbeat", "0.2", "--orphan-timeout", "2", *FAST)
    wait_until(lambda: status_of(run) == "completed", 60, "the run to complete")
    assert run.claimed_by == "rescuer"
    assert "stopped sending heartbeats" in rescuer.log()
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(60) == 0


def test_stale_worker_write_after_takeover_is_rejected(workers):
    """A frozen worker whose run was taken over cannot record its late step outcome."""
    run = schedule(wf.slow, 3)
    stale = workers("stale", "--heartbeat", "0.2", "--orphan-timeout", "0", *FAST)
    wait_until(lambda: started(run, "long"), 60, "the long step to start")
    stale.signal(signal.SIGSTOP)
    fresh = workers("fresh", "--heartbeat", "0.2", "--orphan-timeout", "2", *FAST)
    try:
        wait_until(lambda: status_of(run) == "completed", 90, "the takeover to complete")
    finally:
        stale.signal(signal.SIGCONT)
    wait_until(lambda: "abandoned by this pass" in stale.log(), 60, "the stale write refused")
    run.refresh_from_db()
    assert (run.status, run.claimed_by) == ("completed", "fresh")
    assert [entry["pid"] for entry in run.result] == [stale.pid, fresh.pid, fresh.pid]
    assert Step.objects.filter(workflow=run).count() == 3
    assert Step.objects.get(workflow=run, step_id="2").result["pid"] == fresh.pid
    for proc in (stale, fresh):
        proc.signal(signal.SIGTERM)
        assert proc.wait(60) == 0


def test_unknown_workflow_fails_once(workers):
    """A run of an unregistered workflow is failed once with a clear reason."""
    run = Workflow.objects.create(name="renamed.long_ago", args=[])
    proc = workers("strict", *FAST)
    wait_until(lambda: status_of(run) == "failed", 60, "the run to fail")
    assert "unknown workflow 'renamed.long_ago'" in run.error["message"]
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert proc.log().count("renamed.long_ago") >= 1


def _completed_count() -> int:
    try:
        return Workflow.objects.filter(status="completed").count()
    except DatabaseError:
        connections.close_all()
        return -1


@pytest.mark.backends("postgres", "mariadb")
@pytest.mark.exclusive
def test_workers_survive_a_database_restart(workers):
    """The database server restarts with runs in flight: no worker dies, every run completes."""
    runs = [schedule(wf.slow, 1.5) for _ in range(6)]
    procs = [workers(f"survivor-{i}", "--pool", "3", "--poll", "0.1") for i in range(2)]
    wait_until(lambda: Execution.objects.filter(step="long").count() >= 2, 60, "runs in flight")
    database_server("restart")
    connections.close_all()
    wait_until(lambda: _completed_count() == len(runs), 180, "every run to complete")
    assert all(proc.proc.poll() is None for proc in procs), "no worker died"
    per_run = Step.objects.values("workflow").annotate(n=Count("id"))
    assert {row["n"] for row in per_run} == {3}
    for proc in procs:
        proc.signal(signal.SIGTERM)
    assert [proc.wait(60) for proc in procs] == [0, 0]
    # Through PgBouncer a restart this short can pass unseen: queries wait in the pooler.
    if os.environ.get("EVERYSTEP_TEST_PGBOUNCER") != "1":
        assert any("database unavailable" in proc.log() for proc in procs)


@pytest.mark.backends("postgres")
@pytest.mark.parametrize("notify", [True, False])
@pytest.mark.tiers("several")
def test_idle_worker_wakes_on_notify(workers, notify):
    """With NOTIFY a run scheduled into an idle worker starts long before the next poll;
    without it, polling still picks it up."""
    args = ("--poll", "60") if notify else ("--poll", "0.5", "--no-notify")
    proc = workers("listener", *args)
    wait_until(lambda: Runner.objects.filter(name="listener").exists(), 60, "the worker to start")
    time.sleep(1.0)  # let the first (empty) claim pass and the worker go idle
    run = schedule(wf.three_steps, 1)
    # 20 s is far below the 60 s poll: only the NOTIFY can explain the pickup.
    wait_until(lambda: status_of(run) == "completed", 20, "the run to complete")
    proc.signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def test_second_sigint_requeues_at_once(workers):
    """SIGINT drains; a second SIGINT stops waiting, requeues the run and exits 0."""
    run = schedule(wf.slow, 120)
    proc = workers("impatient", "--drain", "300", *FAST)
    wait_until(lambda: started(run, "long"), 60, "the long step to start")
    proc.signal(signal.SIGINT)
    wait_until(lambda: "SIGINT received: draining" in proc.log(), 30, "the drain to begin")
    proc.signal(signal.SIGINT)
    assert proc.wait(60) == 0
    run.refresh_from_db()
    assert (run.status, run.claimed_by) == ("scheduled", None)
    assert "second SIGINT" in proc.log()


def test_two_sigterms_close_together_never_hang_a_worker(workers):
    """Two SIGTERMs 50 ms apart, as `timeout`, compose and Kubernetes can send, to five
    workers each running a step: every one takes the second as the first's follow-up,
    requeues its run and exits 0 (a second signal inside the first handler once hung a
    worker for good; tests/unit/test_interrupts.py holds that case exactly). Closer
    together the kernel and Python may merge them into one, which only drains."""
    runs = [schedule(wf.slow, 120) for _ in range(5)]
    procs = [workers(f"twice-{n}", "--pool", "1", "--drain", "300", *FAST) for n in range(5)]
    wait_until(lambda: all(started(run, "long") for run in runs), 60, "every long step")
    for proc in procs:
        proc.signal(signal.SIGTERM)
        time.sleep(0.05)
        proc.signal(signal.SIGTERM)
    assert [proc.wait(60) for proc in procs] == [0] * 5
    assert all("second SIGTERM" in proc.log() for proc in procs)
    statuses = Workflow.objects.filter(id__in=[run.id for run in runs]).values_list("status")
    assert set(statuses) == {("scheduled",)}


def test_a_storm_of_sigterms_at_random_moments_never_hangs_a_worker(workers):
    """Two or three SIGTERMs at random moments of the first one's handling (0 to 300 ms
    after it, seeded), twenty workers in four rounds of five, each running a step: every
    worker exits 0, and every run is requeued unclaimed, its completed steps kept."""
    rng = random.Random(53)
    for round_ in range(4):
        runs = [schedule(wf.slow, 120) for _ in range(5)]
        procs = [
            workers(f"storm-{round_}-{n}", "--pool", "1", "--drain", "300", *FAST) for n in range(5)
        ]
        wait_until(
            lambda runs=runs: all(started(run, "long") for run in runs), 60, "every long step"
        )
        plans = [sorted(rng.uniform(0, 0.3) for _ in range(rng.choice((1, 2)))) for _ in procs]
        began = time.monotonic()
        for proc in procs:
            proc.signal(signal.SIGTERM)
        for at in sorted((delay, n) for n, plan in enumerate(plans) for delay in plan):
            time.sleep(max(0.0, at[0] - (time.monotonic() - began)))
            procs[at[1]].signal(signal.SIGTERM)
        codes = [proc.wait(60) for proc in procs]
        assert codes == [0] * 5, (plans, [proc.log()[-2000:] for proc in procs])
        rows = Workflow.objects.filter(id__in=[run.id for run in runs])
        assert set(rows.values_list("status", "claimed_by")) == {("scheduled", None)}, plans
        kept = Step.objects.filter(workflow__in=rows).values_list("step_id", "status")
        assert sorted(kept) == [("1", "done")] * 5  # the first step; the long one runs again
        rows.delete()  # the next round's workers take the next round's runs


def test_drain_zero_waits_for_the_step(workers):
    """--drain 0 waits for the in-flight step however long it takes, then requeues."""
    run = schedule(wf.slow, 3)
    proc = workers("patient", "--drain", "0", *FAST)
    wait_until(lambda: started(run, "long"), 60, "the long step to start")
    proc.signal(signal.SIGTERM)
    assert proc.wait(120) == 0
    run.refresh_from_db()
    assert (run.status, run.claimed_by) == ("scheduled", None)
    recorded = dict(Step.objects.filter(workflow=run).values_list("step_id", "status"))
    assert recorded == {"1": "done", "2": "done"}
