"""SIGTERM and SIGINT for a worker running on the main thread: the first drains (stop
claiming, let steps finish), a second skips the rest of the drain wait and requeues.
The handlers only set the worker's events; the shutdown sequence does the rest."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from everystep.worker.worker_state import WorkerState

logger = logging.getLogger("everystep.worker")


def install(state: WorkerState, stop: Callable[[], None]) -> Callable[[], None]:
    """Install the handlers; returns what puts the previous ones back. Off the main
    thread (an embedded worker) nothing is installed: the host owns its signals."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handle(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        extra = {"runner": state.options.name}
        if state.stop.is_set():
            logger.warning(
                "second %s: requeueing in-flight runs now",
                name,
                extra={"event": "worker.forced", **extra},
            )
            state.force.set()
        else:
            logger.info("%s received: draining", name, extra={"event": "worker.signal", **extra})
        stop()

    for sig in previous:
        signal.signal(sig, handle)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
