"""Log records for the lifecycle signals, with stable event names.

Every record carries ``event``, ``run_id``, ``workflow`` and ``runner`` as ``extra``
fields, so a structured formatter can ship them as they are. ``TextFormatter`` writes
records as text lines no stored name or message can forge; ``JsonFormatter`` as one JSON
object per line.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime
from typing import Any

from everystep import signals, wait_words
from everystep.safe_text import escape_controls

logger = logging.getLogger("everystep.run")


def _fields(event: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        "event": event,
        "run_id": str(kwargs["run_id"]),
        "workflow": kwargs["workflow"],
        "runner": kwargs["runner"],
    }


def _on_run_started(kwargs: dict[str, Any]) -> None:
    if not logger.isEnabledFor(logging.DEBUG):  # once per pass: skip building the record
        return
    logger.debug(
        "run %s (%s) pass started, %d recorded steps",
        kwargs["run_id"],
        kwargs["workflow"],
        kwargs["replayed_steps"],
        extra=_fields("run.pass_started", kwargs),
    )


def _on_step_recorded(kwargs: dict[str, Any]) -> None:
    if not logger.isEnabledFor(logging.DEBUG):  # once per step: skip building the record
        return
    extra = _fields("step.recorded", kwargs) | {
        "step_id": kwargs["step_id"],
        "step": kwargs["step"],
        "status": kwargs["status"],
    }
    logger.debug(
        "run %s step %s (%s) %s",
        kwargs["run_id"],
        kwargs["step_id"],
        kwargs["step"],
        kwargs["status"],
        extra=extra,
    )


def _on_run_finished(kwargs: dict[str, Any]) -> None:
    status = kwargs["status"]
    # A failed run is the application's business, not necessarily an operator's: log it
    # as a warning; a blocked run needs a human, so it is an error.
    level = {"failed": logging.WARNING, "blocked": logging.ERROR}.get(status, logging.INFO)
    if not logger.isEnabledFor(level):  # once per run: skip building the record
        return
    extra = _fields(f"run.{status}", kwargs) | {"status": status}
    error = kwargs.get("error") or {}
    detail = f": {error.get('type')}: {error.get('message')}" if error else ""
    headline = f"run {kwargs['run_id']} ({kwargs['workflow']}) {status}{detail}"
    trace = error.get("traceback")
    if not isinstance(trace, str):
        logger.log(level, "%s", headline, extra=extra)
        return
    # JSON has the traceback as a field of its own, and so has TextFormatter; a formatter
    # of the host project's gets it in the message, below the headline.
    extra |= {"traceback": trace, HEADLINE: headline}
    logger.log(level, "%s\n%s", escape_controls(headline), continuation(trace), extra=extra)


# What starts each line of a multi-line record after its first: a text log's records
# start with their time, so no line of a traceback (or of a message in it) can be read
# as a record of its own.
CONTINUATION = "    | "
# A record's message without the lines its text adds (a failed run's traceback, which
# the record carries as its ``traceback`` field).
HEADLINE = "_headline"


def continuation(text: str) -> str:
    """``text``'s lines, each behind ``CONTINUATION``, control characters escaped."""
    return "\n".join(CONTINUATION + escape_controls(line) for line in text.splitlines())


def _on_run_requeued(kwargs: dict[str, Any]) -> None:
    dead = kwargs.get("dead_runner")
    if dead is not None:
        # Another runner went silent holding this run: worth an operator's look.
        extra = _fields("run.orphan_requeued", kwargs) | {"dead_runner": dead}
        level = logging.WARNING
    else:
        extra, level = _fields("run.requeued", kwargs), logging.INFO
    logger.log(
        level,
        "run %s (%s) requeued: %s",
        kwargs["run_id"],
        kwargs["workflow"],
        kwargs["reason"],
        extra=extra,
    )


def _on_run_suspended(kwargs: dict[str, Any]) -> None:
    due, events, runs = kwargs["due"], kwargs["events"], kwargs["runs"]
    # Worded as the commands word a wait: "sleeps until T", "waits for run ID".
    kind = "event" if events or runs else "sleep"
    until = "" if due is None else due.isoformat()
    logger.info(
        "run %s (%s) %s",
        kwargs["run_id"],
        kwargs["workflow"],
        wait_words.in_words(kind, until, wait_words.awaited(events, runs)),
        extra=_fields("run.waiting", kwargs),
    )


def _on_run_abandoned(kwargs: dict[str, Any]) -> None:
    logger.warning(
        "run %s (%s) abandoned by this pass: %s",
        kwargs["run_id"],
        kwargs["workflow"],
        kwargs["reason"],
        extra=_fields("run.abandoned", kwargs),
    )


signals.run_started.subscribe(_on_run_started)
signals.step_recorded.subscribe(_on_step_recorded)
signals.run_finished.subscribe(_on_run_finished)
signals.run_requeued.subscribe(_on_run_requeued)
signals.run_abandoned.subscribe(_on_run_abandoned)
signals.run_suspended.subscribe(_on_run_suspended)


_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and every ``extra`` field
    (``event``, ``run_id``, ``workflow``, ``runner``, ``step_id``, a failed run's
    ``traceback`` …) at the top level; the message without the lines a text log adds."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": getattr(record, HEADLINE, None) or record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)

    converter = time.gmtime  # type: ignore[assignment]


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class TextFormatter(logging.Formatter):
    """One line per record (``TEXT_FORMAT`` unless given another format), with every
    control character of it escaped: a newline, a carriage return or an ANSI escape in a
    workflow name, an event name or an exception message cannot write what reads as
    another record. The lines a record adds (a failed run's traceback, a logged
    exception, a stack) follow behind ``CONTINUATION``, escaped line by line."""

    def __init__(self, fmt: str | None = TEXT_FORMAT, *args: Any, **kwargs: Any) -> None:
        super().__init__(fmt, *args, **kwargs)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """ISO 8601 with the milliseconds and the UTC offset (``…T10:53:07.914+01:00``)
        unless a ``datefmt`` is given: a line read in another zone, or beside a JSON
        line, says which moment it means."""
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        moment = datetime.fromtimestamp(record.created).astimezone()
        return moment.isoformat(timespec="milliseconds")

    def format(self, record: logging.LogRecord) -> str:
        # A copy: the other handlers of the record see it as it was logged.
        line = logging.makeLogRecord(vars(record))
        line.msg, line.args = getattr(record, HEADLINE, None) or record.getMessage(), None
        line.exc_info, line.exc_text, line.stack_info = None, None, None
        lines = [escape_controls(super().format(line))]
        trace = getattr(record, "traceback", None)
        if isinstance(trace, str) and getattr(record, HEADLINE, None):
            lines.append(continuation(trace))
        if record.exc_info:
            lines.append(continuation(self.formatException(record.exc_info)))
        if record.stack_info:
            lines.append(continuation(self.formatStack(record.stack_info)))
        return "\n".join(lines)
