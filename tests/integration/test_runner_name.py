"""One live process per runner name (issues 33, 40 and 52), with the worker embedded in
this process: a name another process beats under is refused before any catchup, a silent
row is watched (for two of its holder's beats) and then taken over, a row whose process is
provably gone (this host, this pid space, a pid not running) is taken over at once, and a
worker whose name was taken over stops."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from everystep import schedule
from everystep.errors import NameInUse
from everystep.models import Runner, Workflow
from everystep.store.runners import beat, process_space, take_name
from tests.acceptance.conftest import wait_until
from tests.testapp import workflows as wf
from tests.workers import WorkerThread, worker_on_thread

pytestmark = pytest.mark.django_db(transaction=True)


def foreign_row(name: str, *, age: float = 0.0, **holder: object) -> Runner:
    """The heartbeat row another process (host ``elsewhere``, pid 4242, unless ``holder``
    says otherwise) wrote ``age`` seconds ago."""
    at = timezone.now() - timedelta(seconds=age)
    fields = {"host": "elsewhere", "pid": 4242, **holder}
    return Runner.objects.create(
        name=name, boot_id=uuid.uuid4(), pool_size=1, started_at=at, last_seen=at, **fields
    )


def dead_pid() -> int:
    """The pid of a process of this host that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def events_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(record, "event", "") for record in caplog.records]


def parked(name: str) -> Workflow:
    """A run left ``running`` under runner ``name``, as by a process that holds it."""
    run = schedule(wf.sequential, 1, 1)
    Workflow.objects.filter(id=run.id).update(
        status="running", claimed_by=name, claim_token=uuid.uuid4()
    )
    return Workflow.objects.get(id=run.id)


@pytest.fixture
def beating() -> Iterator[threading.Event]:
    """Keeps the row of runner ``busy`` beating, as a live process does, until set."""
    row = foreign_row("busy")
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(0.05):
                Runner.objects.filter(id=row.id).update(last_seen=timezone.now())
        finally:
            connections.close_all()

    thread = threading.Thread(target=beat)
    thread.start()
    yield stop
    stop.set()
    thread.join(30)


def test_a_name_another_process_beats_under_is_refused_before_the_catchup(beating):
    """run() raises NameInUse naming the holder's host and pid; the runs under the name
    stay with their holder and the holder's row stays its own."""
    run = parked("busy")
    started = WorkerThread(name="busy", heartbeat=0.5).start()
    started.join()
    (error,) = started.raised
    assert isinstance(error, NameInUse)
    assert (error.name, error.host, error.pid) == ("busy", "elsewhere", 4242)
    assert "host elsewhere, pid 4242" in str(error)
    after = Workflow.objects.get(id=run.id)
    assert (after.status, after.claim_token) == ("running", run.claim_token)
    assert Runner.objects.get(name="busy").pid == 4242


def test_a_silent_row_is_watched_then_taken_over_and_its_runs_resumed(caplog):
    """A fresh row that does not move for two heartbeats is a crashed predecessor's: the
    name is taken over (this process's host and pid) and the runs under it resumed."""
    foreign_row("phoenix")
    run = parked("phoenix")
    with (
        caplog.at_level(logging.INFO, logger="everystep.worker"),
        worker_on_thread(name="phoenix", heartbeat=0.5, wait_ready=False) as started,
    ):
        wait_until(lambda: Workflow.objects.get(id=run.id).status == "completed", 60, "the run")
    assert started.raised == []
    events = events_of(caplog)
    assert events.index("worker.name_wait") < events.index("worker.name_taken_over")
    assert events.index("worker.name_taken_over") < events.index("worker.catchup")


def test_the_name_holder_is_recorded_and_a_clean_stop_frees_it():
    """The heartbeat row names this process's host and pid; a clean stop removes it."""
    with worker_on_thread(name="plain", heartbeat=0.5):
        row = Runner.objects.get(name="plain")
        assert (row.host, row.pid) == (socket.gethostname(), os.getpid())
    assert not Runner.objects.filter(name="plain").exists()


def test_a_worker_whose_name_was_taken_over_drains_and_leaves_the_row(caplog):
    """Its beat finds another boot's row: it logs worker.name_taken, stops, and does not
    overwrite the row of the process that holds the name now."""
    with caplog.at_level(logging.ERROR, logger="everystep.worker"):
        started = WorkerThread(name="displaced", heartbeat=0.2).start()
        started.wait_ready()
        takeover = uuid.uuid4()
        Runner.objects.filter(name="displaced").update(
            boot_id=takeover, host="elsewhere", pid=4242, last_seen=timezone.now()
        )
        started.join()
    assert started.returned == [True]
    row = Runner.objects.get(name="displaced")
    assert (row.boot_id, row.host, row.pid) == (takeover, "elsewhere", 4242)
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "worker.name_taken"]
    assert "host elsewhere pid 4242" in record.getMessage()


def test_a_stop_while_watching_the_name_returns_without_taking_it(caplog):
    """stop() during the watch: run() returns, the row and the runs under the name are
    left as they were."""
    row = foreign_row("patient")
    run = parked("patient")
    with caplog.at_level(logging.INFO, logger="everystep.worker"):
        started = WorkerThread(name="patient", heartbeat=60).start()
        wait_until(lambda: "worker.name_wait" in events_of(caplog), 60, "the watch")
    started.stop()
    assert started.returned == [True]
    assert Runner.objects.get(name="patient").boot_id == row.boot_id
    after = Workflow.objects.get(id=run.id)
    assert (after.status, after.claim_token) == ("running", run.claim_token)


def test_of_two_boots_taking_one_name_exactly_one_wins():
    """The insert of a free name and the takeover of a silent row each succeed once."""
    state = {"pool_size": 1, "inflight": 0, "draining": False, "started_at": timezone.now()}
    first, second = uuid.uuid4(), uuid.uuid4()
    assert take_name("race", first, None, **state)
    assert not take_name("race", second, None, **state)
    silent = Runner.objects.get(name="race")
    third, fourth = uuid.uuid4(), uuid.uuid4()
    assert take_name("race", third, silent, **state)
    assert not take_name("race", fourth, silent, **state)
    assert Runner.objects.get(name="race").boot_id == third
    assert beat("race", first, **state) is not None, "the first boot was displaced"
    assert Runner.objects.get(name="race").boot_id == third


def test_a_row_of_this_host_whose_pid_is_gone_is_taken_over_at_once(caplog):
    """A SIGKILLed predecessor on this host, in this pid space: its row is fresh, yet its
    process is provably gone, so the name is taken without the watch (a heartbeat of 60 s
    would watch for two minutes) and its runs resumed at once."""
    foreign_row("lazarus", host=socket.gethostname(), pid=dead_pid(), process_space=process_space())
    run = parked("lazarus")
    with (
        caplog.at_level(logging.INFO, logger="everystep.worker"),
        worker_on_thread(name="lazarus", heartbeat=60, wait_ready=False) as started,
    ):
        wait_until(lambda: Workflow.objects.get(id=run.id).status == "completed", 30, "the run")
    assert started.raised == []
    events = events_of(caplog)
    assert "worker.name_wait" not in events
    assert events.index("worker.name_taken_over") < events.index("worker.catchup")


@pytest.mark.parametrize(
    "holder",
    [
        pytest.param({"host": "elsewhere"}, id="another-host"),
        pytest.param({"process_space": "another-boot/pid:1"}, id="another-pid-space"),
        pytest.param({"process_space": None}, id="space-unknown"),
    ],
)
def test_a_dead_looking_pid_elsewhere_is_no_proof_and_the_row_is_watched(caplog, holder):
    """The same pid number on another host, in another pid namespace (another container of
    one pod) or in a row that does not say: it may be alive, so the name is watched."""
    fields = {"host": socket.gethostname(), "pid": dead_pid(), "process_space": process_space()}
    row = foreign_row("doubt", **{**fields, **holder})
    with caplog.at_level(logging.INFO, logger="everystep.worker"):
        started = WorkerThread(name="doubt", heartbeat=60).start()
        wait_until(lambda: "worker.name_wait" in events_of(caplog), 30, "the watch")
    started.stop()
    assert started.returned == [True]
    assert Runner.objects.get(name="doubt").boot_id == row.boot_id


def test_this_processs_own_pid_proves_death_only_without_a_worker_beating_under_it(caplog):
    """Pids are reused: a row naming this process's pid, under a boot no worker of this
    process holds, is a predecessor's and is taken at once; the row of a worker still
    running in this process is not (the embedded Worker may run twice)."""
    with (
        caplog.at_level(logging.INFO, logger="everystep.worker"),
        worker_on_thread(name="twice", heartbeat=60),
    ):
        started = WorkerThread(name="twice", heartbeat=60).start()
        wait_until(lambda: "worker.name_wait" in events_of(caplog), 30, "the watch")
        started.stop()
    caplog.clear()
    row = foreign_row(
        "again", host=socket.gethostname(), pid=os.getpid(), process_space=process_space()
    )
    with (
        caplog.at_level(logging.INFO, logger="everystep.worker"),
        worker_on_thread(name="again", heartbeat=60),
    ):
        assert Runner.objects.get(name="again").boot_id != row.boot_id
    assert "worker.name_wait" not in events_of(caplog)
    assert "worker.name_taken_over" in events_of(caplog)


def test_the_watch_lasts_two_of_the_holders_beats_not_the_watchers(caplog):
    """A holder that beats every 0.2 s and has stopped: a watcher whose own heartbeat is
    60 s takes the name after the shortest watch (5 s), not two minutes."""
    foreign_row("quick", heartbeat=0.2)
    run = parked("quick")
    with (
        caplog.at_level(logging.INFO, logger="everystep.worker"),
        worker_on_thread(name="quick", heartbeat=60, wait_ready=False) as started,
    ):
        wait_until(lambda: Workflow.objects.get(id=run.id).status == "completed", 30, "the run")
    assert started.raised == []
    assert events_of(caplog).index("worker.name_wait") < events_of(caplog).index(
        "worker.name_taken_over"
    )
