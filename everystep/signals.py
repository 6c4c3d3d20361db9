"""Lifecycle signals. Logging, metrics and Sentry subscribe to these; the engine and the
worker only send them, so neither imports a metrics or error-reporting library (spans
are the one exception: they must wrap the work, so the engine opens them through
``everystep.tracing``).

Every signal about a run is sent with ``run_id``, ``workflow`` (the workflow name) and
``runner``.
"""

from __future__ import annotations

from django.dispatch import Signal

# use_caching: step_recorded is sent once per step; caching the receivers per sender
# (always a class here) spares resolving them on every send.

#: A worker claimed runs. Sent with ``runner`` and ``count`` only.
runs_claimed = Signal(use_caching=True)
#: A pass over a run is starting. Extra: ``replayed_steps`` (recorded step count).
run_started = Signal(use_caching=True)
#: A step executed and its outcome was recorded. Extra: ``step_id``, ``step``,
#: ``status`` (done/failed/started), ``duration`` (seconds).
step_recorded = Signal(use_caching=True)
#: A run reached an outcome on this pass. Extra: ``status`` (completed/failed/stopped/
#: blocked), ``duration`` (seconds of this pass), ``error`` (encoded, or None),
#: ``exc`` (the exception object, or None).
run_finished = Signal(use_caching=True)
#: A pass ended at a sleep or a wait: the run is released until it is due. Extra:
#: ``due`` (datetime, or None for an event with no timeout), ``events`` (names awaited).
run_suspended = Signal(use_caching=True)
#: A run resumed at the end of the wait it was released for. Extra: ``step_id``,
#: ``lateness`` (seconds between the intended and the actual wake).
run_woken = Signal(use_caching=True)
#: A run was put back to ``scheduled`` without an outcome (a drain, orphan recovery).
#: Extra: ``reason``; ``dead_runner`` when the run was taken from a silent runner.
run_requeued = Signal(use_caching=True)
#: A pass ended without writing an outcome (claim lost, row deleted, simulated crash).
#: Extra: ``reason``.
run_abandoned = Signal(use_caching=True)
