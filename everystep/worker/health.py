"""Liveness and readiness of a worker, as Kubernetes probes and the image HEALTHCHECK
see them.

- *Liveness*: the claim loop has ticked recently and the heartbeat thread has beaten
  recently. A wedged loop (stuck on a lock, a hung database call without timeout) or a
  heartbeat thread that hangs or dies fails it, so the supervisor restarts the process
  (a worker whose heartbeat stopped would otherwise lose its runs to orphan recovery).
  While draining the loop no longer ticks on purpose, so the loop's part holds, until the
  drain has outlived its deadline (``drain`` and the shutdown's grace) by the liveness
  limit: a process that should have exited by then is stuck (with ``drain`` 0, waiting
  for the steps however long, never).
- *Readiness*: the database answers (as the heartbeat last found it: ``Readiness``),
  everystep's migrations are applied, and the worker is not draining.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, InterfaceError, connections

from everystep.store import reports
from everystep.worker.supervisor import SHUTDOWN_GRACE
from everystep.worker.worker_state import WorkerState

logger = logging.getLogger("everystep.worker")


@dataclass
class Probe:
    ok: bool
    checks: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, **self.checks}


def liveness(worker: WorkerState) -> Probe:
    """Is the claim loop ticking, and is the heartbeat thread beating?"""
    now = time.monotonic()
    age = now - worker.last_tick
    beat_age = now - worker.last_beat
    limit = worker.options.liveness_timeout
    ticking = (worker.draining and not _drain_overrun(worker, now)) or age <= limit
    beating = beat_age <= worker.heartbeat_limit
    checks = {
        "last_tick_age_seconds": round(age, 3),
        "limit_seconds": limit,
        "last_heartbeat_age_seconds": round(beat_age, 3),
        "heartbeat_limit_seconds": worker.heartbeat_limit,
        "draining": worker.draining,
    }
    if worker.stopping_since is not None:
        checks["draining_for_seconds"] = round(now - worker.stopping_since, 3)
    return Probe(ticking and beating, checks)


def _drain_overrun(worker: WorkerState, now: float) -> bool:
    """Whether a drain has outlived its deadline by the liveness limit."""
    drain, since = worker.options.drain, worker.stopping_since
    if drain <= 0 or since is None:
        return False
    return now - since > drain + SHUTDOWN_GRACE + worker.options.liveness_timeout


class Readiness:
    """Readiness checks; the migration check is cached once it has passed, because
    building the migration plan reads every migration file.

    Whether the database answers is the heartbeat's word once it has beaten: a probe of
    its own would open a connection per request, and on a connection a network fault left
    silent it would wait the whole network timeout while the prober gave up long before.
    The heartbeat writes every ``heartbeat`` seconds, so its last success or failure is
    at most that old. Before the first beat (or outside a worker) the probe pings."""

    def __init__(self) -> None:
        self._migrated = False
        self._reachable = True  # as last seen: the reason is logged when that changes

    def __call__(self, worker: WorkerState) -> Probe:
        checks: dict[str, Any] = {"draining": worker.draining}
        silent = worker.database_silent()
        try:
            if silent is not None:
                raise _Silent(f"no heartbeat reached it for {silent:.1f}s")
            if worker.beat_written is None:
                reports.ping()
            checks["database"] = "ok"
            self._reachable = True
            if not self._migrated:
                missing = [m for m in reports.unapplied_migrations() if m.startswith("everystep.")]
                self._migrated = not missing
                if missing:
                    checks["unapplied_migrations"] = missing
            checks["migrations"] = "ok" if self._migrated else "missing"
        except (DatabaseError, InterfaceError, _Silent) as exc:
            # The answer says only "unreachable": a database error's text can name the
            # host, the user, the database, and the probe port may face a wider network
            # than the logs do. The log has the reason, once per outage.
            checks["database"] = "unreachable"
            if self._reachable:
                logger.warning(
                    "readiness: the database is unreachable: %s",
                    exc,
                    extra={"event": "worker.database_unreachable"},
                )
            self._reachable = False
        finally:
            connections.close_all()  # probes run on the HTTP server's threads
        ok = checks["database"] == "ok" and self._migrated and not worker.draining
        return Probe(ok, checks)


class _Silent(Exception):
    """The heartbeat says the database has not answered."""
