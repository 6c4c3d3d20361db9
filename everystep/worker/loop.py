"""``Worker``: the claim loop.

Every ``poll`` seconds (sooner when woken by a finished run or a PostgreSQL NOTIFY):
reap finished runs → capacity = pool - in flight → claim up to capacity in one
transaction → submit to the thread pool. Never more than ``pool_size`` runs in flight;
nothing is claimed while the pool is full.

Here: the worker's lifecycle (start, the loop, the shutdown sequence) and the claim side
(what to claim and when: the backlog, gathering free slots, taking back strays, the time
until the next run is due). A pass on the pool, and what becomes of it when it ends, is
``passes``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from django.utils import timezone

from everystep import signals
from everystep.engine.core.outcome import PassResult
from everystep.errors import EverystepError
from everystep.store import database, network
from everystep.store.claims import claim_due, next_due, reclaim_parked, reclaim_strays
from everystep.store.guard import DATABASE_ERRORS
from everystep.store.wake import Listener, can_listen
from everystep.values import Claim
from everystep.worker import carrying, naming, passes, processes, shutdown, supervisor
from everystep.worker.heartbeat import LOCK_WAIT, Heartbeat
from everystep.worker.http import ProbeServer
from everystep.worker.outage import Outage
from everystep.worker.worker_state import WorkerOptions, WorkerState

logger = logging.getLogger("everystep.worker")

# Seconds between safety-net polls while a PostgreSQL LISTEN is connected.
LISTENING_POLL = 1.0
# Under a backlog, how long a free slot may wait for others before the loop claims for
# it alone (``Worker._gathering``).
GATHER = 0.002


class Worker:
    """A worker process's claim loop and thread pool; ``run()`` blocks until stopped.

    Embedded use: start ``run()`` on a thread and call ``stop()`` (thread-safe). Signal
    handlers (SIGTERM/SIGINT drain, a second signal skips the rest of the drain wait)
    are installed only when ``run()`` is on the main thread.

    Every option is declared, with its limits, in ``everystep.options``; an option left
    ``None`` comes from its Django setting, if it has one, else its default. Invalid
    values raise ``ValueError`` naming the option. ``options`` holds them resolved.
    """

    def __init__(
        self,
        pool_size: int = 4,
        poll: float = 0.2,
        name: str | None = None,
        drain: float = 30,
        metrics_port: int = 0,
        metrics_bind: str = "127.0.0.1",
        *,
        notify: bool | None = None,
        heartbeat: float | None = None,
        orphan_timeout: float | None = None,
        liveness_timeout: float | None = None,
        network_timeout: float | None = None,
        reload: bool = False,
        processes: int | str = 1,
    ) -> None:
        self.options = WorkerOptions.resolve(
            pool_size=pool_size,
            processes=processes,
            poll=poll,
            name=name,
            drain=drain,
            metrics_port=metrics_port,
            metrics_bind=metrics_bind,
            notify=notify,
            heartbeat=heartbeat,
            orphan_timeout=orphan_timeout,
            liveness_timeout=liveness_timeout,
            network_timeout=network_timeout,
            reload=reload,
        )
        self.state = WorkerState(self.options)
        self.ready = self.state.ready  # set once catchup is done and the loop runs
        self._outage = Outage(self.options.name, self.options.poll)
        self._idle = False  # the last claim found nothing
        self._backlogged = False  # the last claim took all it asked for: more are due
        self._free_since: float | None = None  # a slot free and waiting for company
        self._unsure = False  # a claim failed on the connection: it may have committed
        self._next_due: datetime | None = None  # when idle: the next run due, if known
        self._beat: Heartbeat | None = None  # while run() runs
        # A listening socket to serve the probes on instead of ``metrics_port``: a process
        # of a group (``processes``) serves them on loopback for its supervisor.
        self.probe_socket: socket.socket | None = None

    # -- public -----------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to drain and return. Safe from any thread. From a signal
        handler, only when the handler cannot interrupt the main thread inside this
        worker's own calls (it sets an ``Event``, whose lock is not reentrant): a worker
        run on the main thread installs handlers of its own that defer to the loop."""
        self.state.begin_stopping()

    @property
    def draining(self) -> bool:
        return self.state.draining

    @property
    def inflight(self) -> int:
        return self.state.inflight

    @property
    def started_at(self) -> datetime:
        return self.state.started_at

    def run(self) -> bool:
        """Claim and execute runs until stopped, then drain.

        Returns True after a clean drain; False when the drain deadline passed with
        steps still executing (their runs were requeued; their threads are abandoned,
        and a standalone process should exit now rather than wait for them), or, on the
        main thread, when the shutdown outlived the drain by ``SHUTDOWN_GRACE`` seconds
        (a database call still waiting: ``supervisor``).

        Raises ``everystep.errors.NameInUse``, before claiming anything, if another live
        process sends heartbeats under this worker's name; a crashed predecessor's row is
        taken over at once when its process is provably gone (this host, a pid not
        running), else watched for up to two of its heartbeats first. A worker whose
        name another process took over while it was silent drains and returns.

        With ``processes`` above 1, on the main thread only: forks that many worker
        processes and supervises them until they have exited (``processes``); raises
        ``GroupStopped`` when one cannot hold its name.
        """
        if self.options.processes > 1:
            if threading.current_thread() is not threading.main_thread():
                raise EverystepError(
                    "processes > 1 forks worker processes: run() must be called on the "
                    "main thread (manage.py everystep_worker, the runner image)"
                )
            return processes.ProcessGroup(self.options, Worker).run()
        if threading.current_thread() is threading.main_thread():
            # The loop on a thread of its own, this one taking signals (``supervisor``).
            return supervisor.supervise(self.state, self.stop, self._run)
        return self._run()

    def _run(self) -> bool:
        state, options = self.state, self.options
        state.started_at = timezone.now()
        network.configure(options.network_timeout)
        probe = self._probe_server()
        executor = ThreadPoolExecutor(options.pool_size, thread_name_prefix="everystep-run")
        beat = self._beat = Heartbeat(state)
        listen_stop = threading.Event()
        listening = threading.Event()  # stays clear without NOTIFY
        listener: Listener | None = None
        try:
            self._start(beat)
            beat.start()
            if options.notify and can_listen():
                listener = Listener(state.wake, listen_stop)
                listening = listener.listening
                listener.start()
            state.ready.set()
            while not state.stop.is_set():
                state.wake.clear()
                self._tick(executor)
                # While LISTEN holds, a due run wakes the loop at once and the poll is
                # only the safety net: it may be slower, and an idle worker costs less.
                poll = max(options.poll, LISTENING_POLL) if listening.is_set() else options.poll
                state.wake.wait(self._outage.backoff or self._until_due(poll))
        finally:
            listen_stop.set()
            clean = shutdown.drain(state, executor, beat, self.reap)
            if listener is not None:
                # It notices the stop within its wait timeout; returning with it still
                # alive would let it log about a connection after the worker is gone.
                listener.join()
            if probe is not None:
                probe.stop()
        return clean

    # -- the loop ---------------------------------------------------------------------

    def _probe_server(self) -> ProbeServer | None:
        options = self.options
        if not options.metrics_port and self.probe_socket is None:
            return None
        try:
            probe = ProbeServer(self.state, self.probe_socket)
        except OSError as exc:
            raise EverystepError(
                f"cannot serve metrics on {options.metrics_bind}:{options.metrics_port}: {exc}"
            ) from exc
        probe.start()
        return probe

    def _start(self, beat: Heartbeat) -> None:
        options = self.options
        logger.info(
            "worker %s starting: pool %d, poll %gs, drain %gs, %s, notify %s",
            options.name,
            options.pool_size,
            options.poll,
            options.drain,
            database.connection().vendor,
            "on" if options.notify and can_listen() else "off",
            extra={"event": "worker.starting", "runner": options.name},
        )
        while not self.state.stop.is_set():
            self.state.tick()  # retrying the database is not being wedged
            if self._outage.migrating():
                self.state.stop.wait(self._outage.backoff)
                continue
            try:
                database.keep_lock_waits_short(LOCK_WAIT)
                # The catchup below takes every run under the name: never while another
                # live process beats under it (``naming``).
                if not naming.take_name(self.state, beat):
                    return  # stopped while waiting for the name
                # A row locked elsewhere (a frozen process's transaction) must not hold
                # up SIGTERM; on PostgreSQL too, for the rows this takes back.
                with database.lock_waits_at_most(LOCK_WAIT):
                    parked = reclaim_parked(self.options.name)
                break
            except DATABASE_ERRORS as exc:
                self._outage.down(exc)
                self.state.stop.wait(self._outage.backoff)
        else:
            return
        self._outage.up()
        if parked:
            logger.info(
                "worker %s resumes %d run(s) parked under its name",
                self.options.name,
                len(parked),
                extra={"event": "worker.catchup", "runner": self.options.name},
            )
            self._hold(parked)

    def _tick(self, executor: ThreadPoolExecutor) -> None:
        self.state.tick()
        self.reap()
        capacity = self.options.pool_size - self.state.inflight
        if capacity <= 0 or self._gathering(capacity):
            return
        if self._unsure and not self._take_back_strays():
            return
        batch = self._take_backlog(capacity)
        if len(batch) < capacity:
            try:
                claimed = self._claim(capacity - len(batch))
            except DATABASE_ERRORS as exc:
                # The claim may have committed with only its reply lost.
                self._unsure, self._backlogged = True, False
                self._outage.down(exc)
            else:
                self._outage.up()
                self._idle = not claimed
                self._backlogged = len(claimed) == capacity - len(batch)
                if claimed:
                    signals.runs_claimed.emit(
                        sender=Worker, runner=self.options.name, count=len(claimed)
                    )
                batch += claimed
        passes.submit(self.state, executor, batch)

    def _gathering(self, capacity: int) -> bool:
        """Whether to leave ``capacity`` free slots unclaimed a moment longer. While runs
        are waiting (the last claim took all it asked for), claiming for each slot as it
        frees costs a claim statement per run; waiting up to ``GATHER`` seconds for a
        quarter of the pool to be free takes several per claim. The runs waited anyway,
        for a slot; without a backlog every free slot is claimed for at once."""
        if not self._backlogged or capacity * 4 >= self.options.pool_size or self.state.backlog:
            self._free_since = None
            return False
        now = time.monotonic()
        if self._free_since is None:
            self._free_since = now
        if now - self._free_since < GATHER:
            return True
        self._free_since = None
        return False

    def _take_back_strays(self) -> bool:
        """After a claim that failed on the connection: take back, under a fresh token,
        any run the database has under this name that this process does not hold. False
        while the database is still unreachable."""
        state = self.state
        held = {claim.run_id for claim in state.running.values()}
        held.update(claim.run_id for _, claim in state.backlog)
        try:
            database.keep_lock_waits_short(LOCK_WAIT)
            with database.lock_waits_at_most(LOCK_WAIT):
                strays = reclaim_strays(self.options.name, held)
        except DATABASE_ERRORS as exc:
            self._outage.down(exc)
            return False
        self._outage.up()
        self._unsure = False
        if strays:
            logger.warning(
                "worker %s takes back %d run(s) claimed while the connection failed",
                self.options.name,
                len(strays),
                extra={"event": "worker.strays", "runner": self.options.name},
            )
            self._hold(strays)
        return True

    def _hold(self, taken: list[Claim]) -> None:
        """Runs taken back outside a claim (catchup, strays): into the backlog, to start
        as the pool has room, and counted as claimed like any other."""
        self.state.backlog.extend((0.0, held) for held in taken)
        signals.runs_claimed.emit(sender=Worker, runner=self.options.name, count=len(taken))

    def _claim(self, limit: int) -> list[Claim]:
        # An idle worker first asks when the next run is due (one cheap statement): it
        # claims only if one is due now, and otherwise knows how long it may wait.
        database.keep_lock_waits_short(LOCK_WAIT)
        mine = carrying.current()
        if self._idle:
            self._next_due = next_due(mine)
            if self._next_due is None or self._next_due > timezone.now():
                return []
        self._next_due = None
        if self._beat is not None:
            self._beat.freshen()  # back from a pause, this runner's row looks dead
        return claim_due(self.options.name, limit, mine)

    def _until_due(self, poll: float) -> float:
        """Seconds to wait before the next tick: the poll, or less if a sleeping or
        waiting run is due sooner (so it wakes within milliseconds of its time)."""
        if self._free_since is not None:
            return max(self._free_since + GATHER - time.monotonic(), 0.0)
        if self._next_due is None:
            return poll
        left = (self._next_due - timezone.now()).total_seconds()
        return min(poll, max(left, 0.001))

    def _take_backlog(self, capacity: int) -> list[Claim]:
        now = time.monotonic()
        batch: list[Claim] = []
        later: deque[tuple[float, Claim]] = deque()
        backlog = self.state.backlog
        while backlog and len(batch) < capacity:
            not_before, held = backlog.popleft()
            (batch.append(held) if not_before <= now else later.append((not_before, held)))
        backlog.extendleft(reversed(later))
        return batch

    def reap(self) -> list[tuple[Claim, PassResult | None]]:
        """Collect finished runs; fail those that crashed outside the engine."""
        return passes.reap(self.state, self._outage)
