"""The two sides of a fork in a group of worker processes (``processes``): what the
supervisor checks before it forks, and what a child does first.

- ``die_with``: a child is killed when its supervisor dies, so no process keeps claiming
  under a name whose supervisor is gone: Linux's parent-death signal (``prctl``), else a
  thread that watches the parent.
- ``tag_log_records``: every record says which process wrote it (``worker_process``).
- ``warn_of_threads``: a thread started before the fork does not run in the child.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("everystep.worker")

_PR_SET_PDEATHSIG = 1


def warn_of_threads(runner: str) -> None:
    """A thread the project started at import (an SDK's sender, a scheduler) runs in the
    supervisor only: a forked child has the calling thread alone. Said once per thread."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and thread.ident not in _WARNED:
            _WARNED.add(thread.ident)
            logger.warning(
                "thread %r runs in the supervisor of worker %s: it was started at import and "
                "does not run in the worker processes forked from it",
                thread.name,
                runner,
                extra={"event": "workers.thread_not_forked", "runner": runner},
            )


_WARNED: set[int | None] = set()


def how(status: int) -> str:
    """How a child ended, from its ``waitpid`` status, in the words of a log line."""
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with code {os.WEXITSTATUS(status)}"


def die_with(supervisor: int) -> None:
    """Have the kernel kill this child when its supervisor dies (Linux's
    ``PR_SET_PDEATHSIG``); elsewhere a thread that watches the parent does it."""
    try:
        armed = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) == 0
    except (OSError, AttributeError):
        armed = False
    if not armed:
        threading.Thread(target=_watch_parent, args=(supervisor,), daemon=True).start()
    if os.getppid() != supervisor:  # it died before the death signal was armed
        os._exit(0)


def _watch_parent(supervisor: int) -> None:
    while os.getppid() == supervisor:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)


def tag_log_records(process: int | str) -> Callable[..., logging.LogRecord]:
    """Every record logged from now on says which process wrote it (``worker_process``:
    a child's number, or ``supervisor``): the JSON log format writes it beside
    ``runner``. The factory it replaced."""
    previous = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.worker_process = process
        return record

    logging.setLogRecordFactory(factory)
    return previous
