"""A worker on the main thread: its claim loop runs on a thread of its own while the main
thread only waits, handles signals and bounds the shutdown.

Python runs a signal handler on the main thread, between two bytecodes. A claim loop on
the main thread that is blocked in a database driver's C code (a statement on a connection
a network fault left silent) would hold SIGTERM until the call returns: with MariaDB's
client, until the connection is given up on. Waiting on a thread instead, the main thread
takes the signal at once and starts the drain.

And it bounds the shutdown. Once stopped, the worker has ``drain`` seconds for its steps
and ``SHUTDOWN_GRACE`` more to requeue what is left and remove its heartbeat row. A
database that does not answer can hold those statements until the network timeout; past
the bound the process gives up on them and ``run()`` returns False, as it does when steps
outlive the drain, so the command exits. Nothing is lost by leaving early: a run still
held under the name is resumed by a restart under the same name, or by another worker's
orphan recovery once the heartbeat is stale.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from everystep.worker import interrupts
from everystep.worker.worker_state import WorkerState

logger = logging.getLogger("everystep.worker")

# Seconds the shutdown may take beyond the drain (requeues, the heartbeat row, closing).
SHUTDOWN_GRACE = 5.0
# How often the main thread looks at the loop's thread (and runs signal handlers).
_LOOK = 0.2


def supervise(state: WorkerState, stop: Callable[[], None], body: Callable[[], bool]) -> bool:
    """Run ``body`` (the worker's loop and shutdown) on a thread, with this thread's signal
    handlers set; what it returns or raises, or False past the shutdown bound."""
    returned: list[bool] = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            returned.append(body())
        except BaseException as exc:  # handed to the caller's thread below
            raised.append(exc)

    signals = interrupts.Interrupts(state, stop)
    signals.install()
    # A daemon: past the bound, a thread blocked in a database call must not keep the
    # process alive.
    thread = threading.Thread(target=run, name="everystep-loop", daemon=True)
    try:
        thread.start()
        bound = _Bound(state)
        while thread.is_alive():
            thread.join(_LOOK)
            signals.act()
            if bound.passed() and thread.is_alive():
                logger.error(
                    "worker %s did not finish its shutdown within the drain (%gs) and %gs "
                    "more: a database call is still waiting (a network fault?); leaving "
                    "without it. Runs still held under this name are resumed by a restart "
                    "under it or by orphan recovery.",
                    state.options.name,
                    state.options.drain,
                    SHUTDOWN_GRACE,
                    extra={"event": "worker.shutdown_overrun", "runner": state.options.name},
                )
                return False
    finally:
        signals.restore()
    if raised:
        raise raised[0]
    return returned[0]


class _Bound:
    """When the process stops waiting for the loop's thread: ``drain`` and the grace after
    the stop was first seen, or the grace after a second signal skipped the drain. Never
    with ``drain`` 0 (wait indefinitely)."""

    def __init__(self, state: WorkerState) -> None:
        self.state = state
        self.deadline: float | None = None
        self.forced = False

    def passed(self) -> bool:
        state = self.state
        if not state.stop.is_set() or state.options.drain <= 0:
            return False
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + state.options.drain + SHUTDOWN_GRACE
        if state.force.is_set() and not self.forced:
            self.forced = True
            self.deadline = min(self.deadline, now + SHUTDOWN_GRACE)
        return now > self.deadline
