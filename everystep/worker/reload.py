"""``--reload``: restart the worker when the project's code changes, for development.

As runserver does, the command runs twice: a parent that never touches the database
starts the same command line as a child, and starts it again each time the child exits
with ``RESTART``. The child is an ordinary worker plus a watcher: Django's own autoreloader
(the files of every imported module, polled or through watchman) on a thread, which on a
change stops the worker — the usual drain at step boundaries — and the child then exits
with ``RESTART``. A run in flight is requeued by the drain and resumed by the new child
from its records, so a change costs no step twice.

The child runs in a process group of its own and the parent forwards SIGTERM, SIGINT
and SIGHUP to it: Ctrl-C in a terminal then reaches the child once, through the parent,
and not once from the terminal and again from the parent.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from everystep import code_version

if TYPE_CHECKING:
    from everystep.worker.loop import Worker

logger = logging.getLogger("everystep.worker")

CHILD = "EVERYSTEP_RELOAD_CHILD"
RESTART = 3
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def in_child() -> bool:
    """Whether this process is the worker a reloading parent started."""
    return os.environ.get(CHILD) == "1"


def supervise() -> int:
    """The parent: run this command line as a child until it exits with anything but
    ``RESTART``; that exit code. Signals are passed on to the child."""
    from django.utils.autoreload import get_child_arguments

    command = [str(part) for part in get_child_arguments()]
    child: list[subprocess.Popen[bytes]] = []
    stopping: list[int] = []  # the signals received: no restart after one

    def forward(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)
        if child:
            child[0].send_signal(signum)  # a no-op once the child has exited

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    while True:
        process = subprocess.Popen(command, env={**os.environ, CHILD: "1"}, process_group=0)
        child[:] = [process]
        if stopping:  # a signal came while no child ran: pass it on to this one
            process.send_signal(stopping[0])
        code = process.wait()
        if stopping:  # stopped: a drain that also saw a change is a clean stop
            return 0 if code == RESTART else code
        if code != RESTART:
            return code
        logger.info("restarting the worker on the changed code", extra={"event": "worker.reload"})


def run_watched(worker: Worker) -> tuple[bool, int]:
    """``worker.run()``, in a child, with a ``CodeWatcher`` stopping it at a change:
    what ``run()`` returned and the exit code for the process (``RESTART`` after a
    change, else 0)."""
    watcher = CodeWatcher(worker.stop).start()
    try:
        clean = worker.run()
    finally:
        watcher.stop()
    return clean, RESTART if watcher.changed.is_set() else 0


class CodeWatcher:
    """In the child: Django's autoreloader on a thread; ``on_change`` is called once, at
    the first change. ``changed`` says whether it was."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        from django.utils import autoreload

        self.changed = threading.Event()
        self._on_change = on_change
        # Polling file times, as runserver does without watchman: its first look can be
        # taken before the worker starts, so that no edit slips in between.
        self._reloader = autoreload.StatReloader()
        self._thread = threading.Thread(target=self._run, name="everystep-reload", daemon=True)

    def start(self) -> CodeWatcher:
        from django.utils import autoreload

        # Returning True keeps Django from exiting the process: the drain comes first.
        autoreload.file_changed.connect(self._changed, weak=False)
        # What Django's own run() does before its loop: apps add the directories and
        # files they watch (templates, locales).
        autoreload.autoreload_started.send(sender=self._reloader)
        # A module added to the project (a new tasks.py) is no imported module's file:
        # the project's own directories are watched too, as the code version reads them.
        root = code_version.project_root()
        if root is not None:
            self._reloader.watch_dir(root, "*.py")
            for folder in sorted(root.iterdir()):
                if folder.is_dir() and code_version.source_dir(folder):
                    self._reloader.watch_dir(folder, "**/*.py")
        self._ticks = self._reloader.tick()
        next(self._ticks)  # the first look at every file, then one poll interval
        self._thread.start()
        return self

    def stop(self) -> None:
        from django.utils import autoreload

        autoreload.file_changed.disconnect(self._changed)
        self._reloader.stop()

    def _run(self) -> None:
        while not self._reloader.should_stop:
            next(self._ticks)

    def _changed(self, sender: Any, file_path: Any, **_: Any) -> bool:
        if sender is not self._reloader:
            return False
        if not self.changed.is_set():
            self.changed.set()
            logger.info(
                "%s changed: draining, then restarting",
                file_path,
                extra={"event": "worker.code_changed", "path": str(file_path)},
            )
            self._on_change()
        return True
