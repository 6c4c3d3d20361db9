"""The chaos fleet (``bench/chaos.py``): worker processes, and what is done to them —
SIGKILL and a restart, SIGSTOP and SIGCONT, a database server restart — each recorded as
a ``tests.testapp.chaos.Interruption`` for the checks."""

from __future__ import annotations

import argparse
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.server import server_started
from harness.workers import WorkerProcess, Workers

RESTART_DELAY = 2.0  # seconds before a worker that exited on its own is started again


def guarded(query: Callable[[], Any]) -> Any:
    """``query()``, or None while the database cannot be reached (or another session
    restarted it under us)."""
    from django.db import DatabaseError, connection

    try:
        return query()
    except DatabaseError:
        connection.close()
        return None


SESSIONS = {
    "postgresql": "SELECT pid, state, wait_event_type, wait_event, now() - xact_start, "
    "left(query, 160) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    "mysql": "SELECT p.ID, p.COMMAND, p.TIME, p.STATE, t.trx_state, t.trx_started, "
    "LEFT(COALESCE(p.INFO, t.trx_query, ''), 160) FROM information_schema.PROCESSLIST p "
    "LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID "
    "WHERE p.DB = DATABASE() AND p.ID <> CONNECTION_ID()",
}


def server_sessions() -> list[list[str]] | None:
    """The other sessions on the benchmark database, what they run and wait for."""
    from django.db import connection

    query = SESSIONS.get(connection.vendor)
    if query is None:
        return None
    with connection.cursor() as cursor:
        cursor.execute(query)
        return [[str(value) for value in row] for row in cursor.fetchall()]


@dataclass
class Slot:
    """One of the fleet's workers, through its restarts."""

    name: str
    proc: WorkerProcess | None = None
    stopped_at: float | None = None  # SIGSTOP sent (seconds since the epoch)
    stop_held: frozenset[str] = frozenset()
    restart_at: float | None = None  # it exited on its own: start it again then

    @property
    def available(self) -> bool:
        return self.proc is not None and self.stopped_at is None


@dataclass
class Chaos:
    """The fleet and everything done to it."""

    args: argparse.Namespace
    workers: Workers
    rng: random.Random
    slots: list[Slot] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)  # chaos.Interruption
    log: list[dict[str, Any]] = field(default_factory=list)
    self_exits: list[dict[str, Any]] = field(default_factory=list)
    names_used: int = 0
    same_name_next: bool = True
    began: float = field(default_factory=time.time)
    outage: bool = False
    server_started: float | None = None  # after the harness's last restart

    def worker_args(self) -> list[str]:
        a = self.args
        return [
            *("--pool", str(a.pool), "--poll", "0.1", "--drain", "5"),
            *("--heartbeat", str(a.heartbeat), "--orphan-timeout", str(a.orphan_timeout)),
        ]

    def new_name(self) -> str:
        self.names_used += 1
        return f"chaos-{self.names_used - 1}"

    def start_fleet(self) -> None:
        for _ in range(self.args.workers):
            slot = Slot(self.new_name())
            slot.proc = self.workers.restart(slot.name, *self.worker_args())
            self.slots.append(slot)

    def note(self, kind: str, slot: Slot | None = None, **more: Any) -> None:
        now = time.time()
        entry = {"at": round(now - self.began, 2), "t": round(now, 3), "kind": kind, **more}
        if slot is not None:
            entry["worker"] = slot.name
        self.log.append(entry)

    # -- disturbances ---------------------------------------------------------------------

    def kill(self, slot: Slot, held: frozenset[str] | None = None) -> None:
        """SIGKILL, then start a worker in its place: under the same name (it resumes the
        runs parked there) and under a new one (orphan recovery must find them), in turn."""
        from tests.testapp import chaos

        assert slot.proc is not None
        pid, at = slot.proc.pid, time.time()
        slot.proc.kill()
        if held is None:
            held = guarded(lambda: chaos.held_runs(slot.name)) or frozenset()
        self.events.append(chaos.Interruption("kill", at, at, held, pid))
        old = slot.name
        if not self.same_name_next:
            slot.name = self.new_name()
        self.same_name_next = not self.same_name_next
        slot.proc = self.workers.restart(slot.name, *self.worker_args())
        self.note("kill", slot, killed=old, held=len(held), during_outage=self.outage)

    def stop(self, slot: Slot) -> None:
        from tests.testapp import chaos

        assert slot.proc is not None
        slot.stopped_at = time.time()
        slot.proc.proc.send_signal(signal.SIGSTOP)
        slot.stop_held = guarded(lambda: chaos.held_runs(slot.name)) or frozenset()
        self.note("stop", slot, held=len(slot.stop_held))

    def stop_seconds(self) -> float:
        a = self.args
        return a.stop_seconds or a.orphan_timeout + 3 * a.heartbeat

    def maybe_cont(self, slot: Slot, force: bool = False) -> None:
        """SIGCONT once frozen past the orphan timeout and its runs were taken over (or,
        if they never are, after three times as long: noted as a finding); called every
        tick."""
        from tests.testapp import chaos

        if slot.stopped_at is None or slot.proc is None:
            return
        # A claim the process sent just before SIGSTOP may commit just after it: what it
        # holds is every run seen under its name while it is frozen.
        held_now = guarded(lambda: chaos.held_runs(slot.name))
        slot.stop_held |= held_now or frozenset()
        frozen = time.time() - slot.stopped_at
        if frozen < self.stop_seconds() and not force:
            return
        taken_over = held_now is not None and not held_now
        if not (taken_over or force or frozen > 3 * self.stop_seconds()):
            return
        # Why nobody took over, seen from the server while the process is still frozen.
        sessions = None if taken_over or force else guarded(server_sessions)
        at = time.time()
        slot.proc.proc.send_signal(signal.SIGCONT)
        self.events.append(
            chaos.Interruption("stop", slot.stopped_at, at, slot.stop_held, slot.proc.pid)
        )
        self.note("cont", slot, frozen_s=round(frozen, 1), taken_over=taken_over)
        if sessions is not None:
            self.log[-1]["sessions"] = sessions
        slot.stopped_at = None

    def disturb(self) -> None:
        candidates = [slot for slot in self.slots if slot.available]
        if not candidates:
            return
        slot = self.rng.choice(candidates)
        frozen = any(s.stopped_at is not None for s in self.slots)
        # SQLite: kills only. A process frozen inside a write transaction holds the one
        # write lock, and every other worker waits for it until it resumes.
        if self.args.db != "sqlite" and not frozen and self.rng.random() < 0.4:
            self.stop(slot)
        else:
            self.kill(slot)

    def restart_database(self) -> bool:
        """Server down; a worker killed and started while it is down; server up. False
        if the runs held could not be read first (the server is already away)."""
        from tests.acceptance.conftest import database_server
        from tests.testapp import chaos

        claims = guarded(chaos.running_claims)
        if claims is None:
            return False
        victims = [slot for slot in self.slots if slot.available]

        def kill_one() -> None:
            if victims:
                victim = self.rng.choice(victims)
                self.kill(victim, frozenset(r for r, who in claims.items() if who == victim.name))

        self.outage = True
        event = chaos.restart_server(database_server, kill_one)
        self.outage = False
        self.events.append(event)
        self.server_started = server_started()
        self.note("db-restart", down_s=round(event.end - event.start, 2), held=len(claims))
        return True

    # -- workers that exit on their own ------------------------------------------------------

    def watch_exits(self) -> None:
        """A worker that exits unasked (one started while the database is down may) is
        started again after ``RESTART_DELAY`` seconds under the same name, and counted."""
        now = time.time()
        for slot in self.slots:
            if slot.proc is not None and slot.proc.proc.poll() is not None:
                tail = slot.proc.log_path.read_text(errors="replace").splitlines()[-3:]
                self.self_exits.append(
                    {"worker": slot.name, "code": slot.proc.proc.returncode, "log_tail": tail}
                )
                self.note("exited", slot, code=slot.proc.proc.returncode)
                slot.proc, slot.stopped_at, slot.restart_at = None, None, now + RESTART_DELAY
            elif slot.proc is None and slot.restart_at is not None and now >= slot.restart_at:
                slot.proc = self.workers.restart(slot.name, *self.worker_args())
                slot.restart_at = None
                self.note("restarted", slot)

    def calm(self) -> bool:
        """No worker frozen and none waiting to be started again."""
        return all(slot.stopped_at is None and slot.proc is not None for slot in self.slots)
