"""What the probes, the metrics, the heartbeat and the drain read of a running worker.

``Worker`` resolves its options once into a ``WorkerOptions`` and owns one
``WorkerState`` holding them; it hands that state to its collaborators, so none of them
imports the worker class or reaches into its private fields.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from everystep import conf, cpus
from everystep.options import AUTO
from everystep.values import Claim

if TYPE_CHECKING:
    from everystep.worker.event_loop import EventLoop


@dataclass(frozen=True)
class WorkerOptions:
    """A worker's options, resolved once: one field per option of ``everystep.options``,
    under the same name, with its effective value (never ``None``)."""

    pool_size: int
    processes: int  # ``auto`` resolved: the CPUs this process may use
    poll: float
    name: str
    drain: float
    metrics_port: int
    metrics_bind: str
    notify: bool
    heartbeat: float
    orphan_timeout: float
    liveness_timeout: float
    network_timeout: float
    reload: bool

    @classmethod
    def resolve(cls, **given: Any) -> WorkerOptions:
        """The options from ``given`` (``None`` = not given), else the Django settings,
        else the defaults. Raises ``OptionError`` naming every invalid option."""
        values = conf.worker_options(**given)
        name = values.pop("name") or socket.gethostname()
        if values["processes"] == AUTO:
            values["processes"] = cpus.available().count
        # A tick waits at most max(poll, the listening poll, the database backoff), so
        # the default leaves a wide margin before liveness fails.
        liveness = values.pop("liveness_timeout") or max(60.0, 10 * values["poll"])
        return cls(name=name, liveness_timeout=liveness, **values)


@dataclass
class WorkerState:
    """The live state of one worker: its options, its runs, and the events that stop it."""

    options: WorkerOptions
    started_at: datetime = field(default_factory=timezone.now)
    last_tick: float = field(default_factory=time.monotonic)  # the claim loop is ticking
    last_beat: float = field(default_factory=time.monotonic)  # the heartbeat thread is
    beat_written: float | None = None  # when the last beat the database took was sent
    # Due runs this worker leaves for a worker on other code, by name, at the last check
    # (``worker.carrying``): the metrics read it.
    left_for_other_code: dict[str, int] = field(default_factory=dict)
    # The heartbeat's last attempt failed on the database (readiness reads it).
    beat_failing: bool = False
    stop: threading.Event = field(default_factory=threading.Event)  # stop claiming, drain
    force: threading.Event = field(default_factory=threading.Event)  # stop the drain wait
    wake: threading.Event = field(default_factory=threading.Event)  # a run ended, a NOTIFY
    ready: threading.Event = field(default_factory=threading.Event)  # catchup done
    # Runs submitted to the pool, and runs held but not submitted yet (catchup beyond
    # the pool, passes waiting for the database), each with the time it may start.
    running: dict[Future[Any], Claim] = field(default_factory=dict)
    backlog: deque[tuple[float, Claim]] = field(default_factory=deque)
    # The event loop of async runs' passes, started with the first one.
    event_loop: EventLoop | None = None
    # When the worker was first asked to stop (monotonic; None: not yet). Liveness fails
    # once a drain has outlived its deadline by far (``health.liveness``).
    stopping_since: float | None = None

    @property
    def draining(self) -> bool:
        return self.stop.is_set()

    @property
    def inflight(self) -> int:
        return len(self.running)

    def tick(self) -> None:
        self.last_tick = time.monotonic()

    def begin_stopping(self) -> None:
        """Stop claiming and drain: the events the loop and the drain wait on, and the
        time of the first ask."""
        if self.stopping_since is None:
            self.stopping_since = time.monotonic()
        self.stop.set()
        self.wake.set()

    def beat_attempted(self) -> None:
        """The heartbeat thread finished a beat, whether the database took it or not
        (an outage is readiness's business; a hung or dead thread is liveness's)."""
        self.last_beat = time.monotonic()

    def database_silent(self) -> float | None:
        """Seconds since the database last took a beat, when that says it is unreachable:
        the last beat failed, or none was taken for two intervals and a second (a beat
        stuck on a connection nothing answers). None while it answers, or before the
        first beat."""
        if self.beat_written is None:
            return None
        age = time.monotonic() - self.beat_written
        if self.beat_failing or age > 2 * self.options.heartbeat + 1:
            return age
        return None

    @property
    def heartbeat_limit(self) -> float:
        """Seconds without a beat attempt after which liveness fails."""
        return max(self.options.liveness_timeout, 3 * self.options.heartbeat)
