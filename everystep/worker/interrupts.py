"""SIGTERM and SIGINT for a worker running on the main thread: the first drains (stop
claiming, let steps finish), a second skips the rest of the drain wait and requeues.

A handler only notes the signal; the main thread acts on it (``Interrupts.act``) when it
next looks at the loop, within ``supervisor._LOOK`` seconds. Python runs a handler on the
main thread between two bytecodes, possibly inside another handler: one that set the
worker's events or logged could interrupt a frame holding the same non-reentrant lock (an
``Event``'s, the log stream's) and wait for it for ever. A second SIGTERM that arrived
while the first handler was inside ``Event.set()`` hung a worker that way, with its
heartbeat fresh. Appending to a list takes no lock.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from everystep.worker.worker_state import WorkerState

logger = logging.getLogger("everystep.worker")


class Interrupts:
    """The worker's signal handlers, installed on the main thread by ``install``."""

    def __init__(self, state: WorkerState, stop: Callable[[], None]) -> None:
        self.state, self.stop = state, stop
        self.pending: list[int] = []  # signal numbers not yet acted on, oldest first
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        """Install the handlers. Off the main thread (an embedded worker) nothing is
        installed: the host owns its signals."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.previous[sig] = signal.signal(sig, self.handle)

    def restore(self) -> None:
        """Put the previous handlers back."""
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()

    def handle(self, signum: int, frame: Any) -> None:
        """The handler itself: note the signal, nothing else (see the module's doc)."""
        self.pending.append(signum)

    def act(self) -> None:
        """On the main thread, outside any handler: drain on the first signal, force on
        the next."""
        while self.pending:
            name = signal.Signals(self.pending.pop(0)).name
            extra = {"runner": self.state.options.name}
            if self.state.stop.is_set():
                logger.warning(
                    "second %s: requeueing in-flight runs now",
                    name,
                    extra={"event": "worker.forced", **extra},
                )
                self.state.force.set()
            else:
                logger.info(
                    "%s received: draining", name, extra={"event": "worker.signal", **extra}
                )
            self.stop()
