"""``--processes N``: one supervisor and N worker processes, one worker to the outside.

A worker's pool threads share one interpreter lock, so one process uses about one core.
Past that, the supervisor forks N children, each an ordinary ``Worker`` (its own pool,
connections, claim loop, heartbeat and, on PostgreSQL, its own LISTEN), and watches them.

- **Fork, not spawn**: the supervisor forks once the project is imported and checked, so
  Django, the project's code and its settings are loaded once and shared copy-on-write,
  and a child that died is replaced in milliseconds, without importing anything again.
  Before each fork the supervisor holds no database connection and runs no thread (its
  HTTP port is served on its own main thread), so a child inherits no lock held by a
  thread that does not exist in it.
- **Names**: child 0 works under the group's name, child k under ``NAME/k``. Each holds
  its name by the usual rule (one live process per name, ``naming``), so a second group
  under the same name is refused, and a child restarted after a crash takes its name over
  at once (its predecessor's pid is gone, on this host) and resumes the runs left under it
  — no orphan timeout. Going from one process to N keeps child 0's catchup.
- **Supervision**: a child that dies (a signal, a crash, running out of memory) is forked
  again at once, then with a growing delay while it keeps dying within ``QUICK`` seconds
  of its start. A run that kills every child taking it is failed at
  ``EVERYSTEP_MAX_RECOVERIES``, as it is with one process; a child that cannot hold its
  name (``CANNOT_START``) stops the group.
- **Signals**: SIGTERM or SIGINT is passed on to every child, which drains at its step
  boundaries; a second is passed on again (the children requeue at once). The supervisor
  returns when every child has exited, or gives them up (SIGKILL) past the drain and
  ``SHUTDOWN_GRACE`` more. Each child dies with its supervisor (Linux's parent-death
  signal, else a thread watching its parent), so no child keeps claiming under a name
  whose supervisor is gone.
- **One port** (``merged``): ``/metrics`` sums the children's, and ``/healthz`` and
  ``/readyz`` fail while any child is gone or fails its own.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import FrameType
from typing import TYPE_CHECKING

from django.db import connections

from everystep.errors import EverystepError, NameInUse
from everystep.options import BY_NAME
from everystep.worker import forking
from everystep.worker.merged import MergedPort
from everystep.worker.supervisor import SHUTDOWN_GRACE
from everystep.worker.worker_state import WorkerOptions

if TYPE_CHECKING:
    from everystep.worker.loop import Worker

logger = logging.getLogger("everystep.worker")

# A child's exit code when it cannot work under its name (another live process holds
# it): restarting it would be refused again, so the group stops.
CANNOT_START = 3
# A child that dies sooner than this after its start is in a crash streak: each restart
# waits twice as long as the last, from FIRST_DELAY up to LONGEST_DELAY.
QUICK = 10.0
FIRST_DELAY = 0.25
LONGEST_DELAY = 10.0
# How often the supervisor reaps, restarts and acts on signals when its port is idle.
_LOOK = 0.1


class GroupStopped(EverystepError):
    """The group stopped because a child could not work under its name."""


def child_name(name: str, index: int) -> str:
    """The runner name of child ``index``: child 0 works under the group's own name."""
    return name if index == 0 else f"{name}/{index}"


@dataclass
class Slot:
    """One child's place in the group: its name and probe socket stay, its process may
    be replaced."""

    index: int
    name: str
    probe: socket.socket | None  # loopback, bound by the supervisor: the child serves it
    pid: int | None = None
    started: float = 0.0
    streak: int = 0  # deaths in a row, each within QUICK of its start
    restart_at: float | None = None


class ProcessGroup:
    """The supervisor of ``options.processes`` worker processes; ``run()`` blocks until
    they have all exited. ``make_worker`` builds a child's ``Worker`` from its options."""

    def __init__(self, options: WorkerOptions, make_worker: Callable[..., Worker]) -> None:
        self.options = options
        self.make_worker = make_worker
        longest = child_name(options.name, options.processes - 1)
        limit = BY_NAME["name"].maximum or 255
        if len(longest) > limit:
            raise EverystepError(
                f"invalid option: name must leave room for the children's names (up to "
                f"{longest!r}): at most {limit:g} characters with the suffix"
            )
        self.port: MergedPort | None = None
        self.slots: list[Slot] = []
        self.pending: list[int] = []  # signals not yet acted on (see ``interrupts``)
        self.stopping_since: float | None = None
        self.failed: str | None = None
        self.clean = True

    def run(self) -> bool:
        """Start the children and supervise them until they have exited: True after a
        clean stop, False when children were given up past the shutdown bound. Raises
        ``GroupStopped`` when a child could not hold its name."""
        factory = forking.tag_log_records("supervisor")
        try:
            return self._run()
        finally:
            logging.setLogRecordFactory(factory)

    def _run(self) -> bool:
        options = self.options
        if options.metrics_port:
            try:
                self.port = MergedPort(options, self.slots)
            except OSError as exc:
                raise EverystepError(
                    f"cannot serve metrics on {options.metrics_bind}:{options.metrics_port}: {exc}"
                ) from exc
        for index in range(options.processes):
            probe = socket.create_server(("127.0.0.1", 0)) if self.port else None
            self.slots.append(Slot(index, child_name(options.name, index), probe))
        previous = {sig: signal.signal(sig, self._note) for sig in (signal.SIGTERM, signal.SIGINT)}
        logger.info(
            "worker %s starting %d processes, each with a pool of %d (children %s … %s)",
            options.name,
            options.processes,
            options.pool_size,
            self.slots[0].name,
            self.slots[-1].name,
            extra={"event": "workers.starting", "runner": options.name},
        )
        try:
            for slot in self.slots:
                self._fork(slot)
            self._supervise()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._kill_all()  # only left after an error in the supervisor itself
            if self.port is not None:
                self.port.close()
            for slot in self.slots:
                if slot.probe is not None:
                    slot.probe.close()
        if self.failed:
            raise GroupStopped(self.failed)
        logger.info(
            "worker %s stopped: every process has exited",
            options.name,
            extra={"event": "workers.stopped", "runner": options.name},
        )
        return self.clean

    # -- the supervisor's loop -------------------------------------------------------

    def _supervise(self) -> None:
        while True:
            self._act()
            self._reap()
            alive = [slot for slot in self.slots if slot.pid is not None]
            if self.stopping_since is not None:
                if not alive:
                    return
                if self._overran():
                    self.clean = False
                    return
            else:
                self._restart_due()
            if self.port is not None:
                self.port.serve(_LOOK)
            else:
                time.sleep(_LOOK)

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        self.pending.append(signum)  # nothing else in a handler (``interrupts``)

    def _act(self) -> None:
        while self.pending:
            signum = self.pending.pop(0)
            name = signal.Signals(signum).name
            if self.stopping_since is None:
                logger.info(
                    "%s received: draining every process",
                    name,
                    extra={"event": "workers.signal", "runner": self.options.name},
                )
                self._begin_stopping()
            else:
                logger.warning(
                    "second %s: every process requeues its runs now",
                    name,
                    extra={"event": "workers.forced", "runner": self.options.name},
                )
                # The children's bound is now the grace alone: so is this one.
                self.stopping_since = min(
                    self.stopping_since, time.monotonic() - self.options.drain
                )
            self._signal_all(signal.SIGTERM)

    def _begin_stopping(self) -> None:
        if self.stopping_since is None:
            self.stopping_since = time.monotonic()

    def _overran(self) -> bool:
        """Past the drain and the shutdown grace (and a second more, the children's own
        bound being the same): the children left are killed. Never with ``drain`` 0."""
        if not self.options.drain or self.stopping_since is None:
            return False
        bound = self.options.drain + SHUTDOWN_GRACE + 1.0
        if time.monotonic() - self.stopping_since < bound:
            return False
        left = [slot for slot in self.slots if slot.pid is not None]
        logger.error(
            "worker %s: %d process(es) still running %gs after the stop (%s): killed; "
            "runs still held under their names are resumed by a restart under the name or "
            "by orphan recovery",
            self.options.name,
            len(left),
            bound,
            ", ".join(f"{slot.name} pid {slot.pid}" for slot in left),
            extra={"event": "workers.shutdown_overrun", "runner": self.options.name},
        )
        self._kill_all()
        return True

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = next((slot for slot in self.slots if slot.pid == pid), None)
            if slot is not None:
                slot.pid = None
                self._exited(slot, pid, status)

    def _exited(self, slot: Slot, pid: int, status: int) -> None:
        how = forking.how(status)
        lived = time.monotonic() - slot.started
        extra = {"runner": slot.name, "child": slot.index}
        if self.stopping_since is not None:
            logger.info(
                "process %d (%s) %s",
                slot.index,
                slot.name,
                how,
                extra={"event": "workers.child_exited", **extra},
            )
            return
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == CANNOT_START:
            self.failed = (
                f"process {slot.index} of worker {self.options.name} could not work under "
                f"the name {slot.name!r} (the line above says why): every process stops"
            )
            logger.error(self.failed, extra={"event": "workers.cannot_start", **extra})
            self._begin_stopping()
            self._signal_all(signal.SIGTERM)
            return
        slot.streak = slot.streak + 1 if lived < QUICK else 1
        delay = (
            0.0 if slot.streak == 1 else min(FIRST_DELAY * 2 ** (slot.streak - 2), LONGEST_DELAY)
        )
        slot.restart_at = time.monotonic() + delay
        logger.warning(
            "process %d (%s, pid %s) %s after %.1fs; started again %s: its runs are resumed "
            "from their records",
            slot.index,
            slot.name,
            pid,
            how,
            lived,
            "now" if not delay else f"in {delay:g}s ({slot.streak} quick deaths in a row)",
            extra={"event": "workers.child_died", **extra},
        )

    def _restart_due(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if slot.pid is None and slot.restart_at is not None and slot.restart_at <= now:
                slot.restart_at = None
                self._fork(slot)

    def _signal_all(self, signum: int) -> None:
        for slot in self.slots:
            if slot.pid is not None:
                with contextlib.suppress(ProcessLookupError):  # exited, not reaped yet
                    os.kill(slot.pid, signum)

    def _kill_all(self) -> None:
        self._signal_all(signal.SIGKILL)
        for slot in self.slots:
            if slot.pid is not None:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(slot.pid, 0)
                slot.pid = None

    # -- a child ----------------------------------------------------------------------

    def _fork(self, slot: Slot) -> None:
        # Nothing the child would share by accident: no connection (two processes on one
        # socket interleave their protocol), no unwritten output (written twice).
        connections.close_all()
        sys.stdout.flush()
        sys.stderr.flush()
        forking.warn_of_threads(self.options.name)
        # What is loaded now stays shared: frozen, the collector of a child never walks
        # (and so never writes to) these objects, and its full collections are shorter.
        gc.freeze()
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:
            self._child(slot, supervisor)  # never returns
        slot.pid, slot.started = pid, time.monotonic()

    def _child(self, slot: Slot, supervisor: int) -> None:
        code = 70  # EX_SOFTWARE: a crash of the child's own code; restarted
        try:
            forking.die_with(supervisor)
            os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the supervisor only
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)  # the worker installs its own
            if self.pending or self.stopping_since is not None:
                os._exit(0)  # a stop came in just as it was forked
            if self.port is not None:
                self.port.close()
            for other in self.slots:
                if other is not slot and other.probe is not None:
                    other.probe.close()
            forking.tag_log_records(slot.index)
            kwargs = asdict(self.options) | {"name": slot.name, "processes": 1, "metrics_port": 0}
            worker = self.make_worker(**kwargs)
            worker.probe_socket = slot.probe
            worker.run()  # an overrun drain requeued its runs too: a stop, exit 0
            code = 0
        except NameInUse as exc:
            logger.error(
                "process %d: %s",
                slot.index,
                exc,
                extra={"event": "worker.name_in_use", "runner": slot.name},
            )
            code = CANNOT_START
        except BaseException:
            logger.exception(
                "process %d (%s) crashed",
                slot.index,
                slot.name,
                extra={"event": "worker.crashed", "runner": slot.name},
            )
        finally:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
