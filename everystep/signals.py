"""Lifecycle signals. Logging, metrics and Sentry subscribe to these; the engine and the
worker only emit them, so neither imports a metrics or error-reporting library (spans
are the one exception: they must wrap the work, so the engine opens them through
``everystep.tracing``).

Each is a Django signal, for a project's own receivers. everystep's own subscribers are
called directly (``Lifecycle.subscribe``), before the signal is sent: Django's dispatch
(resolving its weakly held receivers, splitting sync from async ones, re-packing the
arguments for each receiver) was about 6 % of a worker's client instructions per run, on
signals that, without a project receiver, nobody else hears.

Every signal about a run is sent with ``run_id``, ``workflow`` (the workflow name) and
``runner``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.dispatch import Signal

#: An everystep subscriber: called with the signal's arguments, ``sender`` aside.
Hook = Callable[[dict[str, Any]], None]


class Lifecycle(Signal):
    """A lifecycle signal: a Django signal (``connect`` your receivers as usual) that
    calls everystep's own subscribers first."""

    def __init__(self) -> None:
        # use_caching: step_recorded is sent once per step; caching the receivers per
        # sender (always a class here) spares resolving them on every send.
        super().__init__(use_caching=True)
        self.hooks: tuple[Hook, ...] = ()
        self._hooks_lock = threading.Lock()

    def subscribe(self, hook: Hook) -> None:
        """Call ``hook`` with the arguments of every ``emit`` (idempotent)."""
        with self._hooks_lock:
            if hook not in self.hooks:
                self.hooks += (hook,)

    def emit(self, sender: Any, **kwargs: Any) -> None:
        """Call the subscribers, then send the signal if anyone is connected to it."""
        for hook in self.hooks:
            hook(kwargs)
        if self.receivers:
            self.send(sender, **kwargs)


#: A worker claimed runs. Sent with ``runner`` and ``count`` only.
runs_claimed = Lifecycle()
#: A pass over a run is starting. Extra: ``replayed_steps`` (recorded step count).
run_started = Lifecycle()
#: A step executed and its outcome was recorded. Extra: ``step_id``, ``step``,
#: ``status`` (done/failed/started), ``duration`` (seconds).
step_recorded = Lifecycle()
#: A run reached an outcome on this pass. Extra: ``status`` (completed/failed/stopped/
#: blocked), ``duration`` (seconds of this pass), ``error`` (encoded, or None),
#: ``exc`` (the exception object, or None).
run_finished = Lifecycle()
#: A pass ended at a sleep or a wait: the run is released until it is due. Extra:
#: ``due`` (datetime, or None for an event with no timeout), ``events`` (names awaited),
#: ``runs`` (ids of the runs awaited, by ``result``/``gather``).
run_suspended = Lifecycle()
#: A run resumed at the end of the wait it was released for. Extra: ``step_id``,
#: ``lateness`` (seconds between the intended and the actual wake).
run_woken = Lifecycle()
#: A run was put back to ``scheduled`` without an outcome (a drain, orphan recovery).
#: Extra: ``reason``; ``dead_runner`` when the run was taken from a silent runner.
run_requeued = Lifecycle()
#: Runs were cancelled (``cancel()``, ``everystep_cancel``, the UI, a bulk action), their
#: unfinished children with them; sent once their cancellation has committed. Sent with
#: ``run_ids`` and ``by`` (who cancelled them) only: no worker's pass was involved.
runs_cancelled = Lifecycle()
#: A pass ended without writing an outcome (claim lost, row deleted, simulated crash).
#: Extra: ``reason``.
run_abandoned = Lifecycle()
