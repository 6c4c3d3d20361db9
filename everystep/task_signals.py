"""Django's task signals sent for everystep's task runs (``everystep.task_runs`` says
when): the framework's own ``Signal`` objects, sent robustly, so that a receiver's
exception is logged and never changes a run's outcome."""

from __future__ import annotations

import logging
from typing import Any

from everystep.task_framework import framework_module

logger = logging.getLogger("everystep.run")


def send(task: Any, signal_name: str, result: Any) -> None:
    """Send one of Django's task signals; a receiver that raises is logged, never lets
    the run's pass fail (its outcome is already, or about to be, written)."""
    signal = getattr(framework_module(task, "signals"), signal_name)
    sender = type(task.get_backend())
    for receiver, response in signal.send_robust(sender=sender, task_result=result):
        if isinstance(response, Exception):
            logger.error(
                "a receiver of %s (%r) raised for run %s: %s",
                signal_name,
                receiver,
                result.id,
                response,
                exc_info=response,
                extra={"event": "task.signal_failed", "run_id": result.id},
            )


def finished(task: Any, result: Any, exc: BaseException | None) -> None:
    """Send ``task_finished``, for a failed run while its exception is being handled, as
    Django's own backends send it: Django's receiver logs the failure with
    ``logger.exception``, which reads the exception being handled (error trackers take
    the traceback from there)."""
    if exc is None:
        send(task, "task_finished", result)
        return
    traceback = exc.__traceback__
    try:
        raise exc
    except BaseException:
        send(task, "task_finished", result)
    finally:
        exc.__traceback__ = traceback  # as it was: raising it here added this frame
