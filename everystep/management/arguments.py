"""Argument checks, the wording of waits, and the filter flags of the bulk actions
(``add_filter_arguments``, ``run_or_filter``), shared by everystep's management commands."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, overload

from django.core.management.base import CommandError, CommandParser

from everystep import safe_text, serde
from everystep.errors import EverystepError
from everystep.models import Event, Status
from everystep.store import bulk
from everystep.store.reports import ID_PREFIX_MIN, WaitReport, id_digits, runs_by_id_prefix
from everystep.times import parse_moment
from everystep.wait_words import in_words

# An argument echoed in an error message is cut to this many characters, so a pasted
# megabyte still gives a one-line message.
SHOWN = 60


def shown(value: str) -> str:
    """``repr(value)``, cut to about ``SHOWN`` characters: an argument in a message."""
    return repr(value) if len(value) <= SHOWN else repr(value[:SHOWN]) + "…"


def clipped(value: str) -> str:
    """``value`` as printable text cut to about ``SHOWN`` characters, without quotes."""
    text = safe_text.escape_controls(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + "…"


# Runs an ambiguous id prefix's error names, of all it matches.
PREFIX_SHOWN = 3
# How a run id argument's help says what ``checked_run_id`` takes.
RUN_ID_HELP = f"a UUID, or its first {ID_PREFIX_MIN}+ hex digits if no other run's id starts so"


def checked_run_id(value: str) -> str:
    """``value`` as a canonical run id: a UUID as it is (whether a run has it is the
    caller's question), or the id of the one run whose id starts with ``value`` (at least
    ``ID_PREFIX_MIN`` hex digits, dashes and case ignored, as the UI's search takes
    them); else a ``CommandError`` saying why: not an id, no such run, or several."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        pass
    digits = id_digits(value)
    if digits is None:
        raise CommandError(
            f"{shown(value)} is not a run id (a UUID, or its first {ID_PREFIX_MIN} or more "
            "hex digits)"
        )
    found = runs_by_id_prefix(digits, PREFIX_SHOWN)
    if found.count == 0:
        raise CommandError(f"no run with id {clipped(value)} (or an id starting with it)")
    if found.count > 1:
        some = ", ".join(f"{run.id} ({clipped(run.name)})" for run in found.runs)
        more = ", …" if found.count > len(found.runs) else ""
        raise CommandError(
            f"run id prefix {clipped(value)} matches {found.count:,} runs ({some}{more}); "
            "give more of the id"
        )
    return str(found.runs[0].id)


@overload
def checked_text(value: str, what: str) -> str: ...
@overload
def checked_text(value: None, what: str) -> None: ...


def checked_text(value: str | None, what: str) -> str | None:
    """``value`` if the database can store (and so match) it, else a ``CommandError``:
    a NUL character, or bytes that are not UTF-8 in the command line."""
    if value is None:
        return None
    try:
        return safe_text.storable_text(value, what)
    except EverystepError as exc:
        raise CommandError(str(exc)) from None


def checked_count(value: int, flag: str, maximum: int) -> int:
    """``value`` if it is from 1 to ``maximum``, else a ``CommandError`` naming ``flag``
    (a count beyond what the databases' LIMIT takes never reaches them)."""
    if value < 1:
        raise CommandError(f"{flag} must be at least 1, not {value}")
    if value > maximum:
        raise CommandError(f"{flag} must be at most {maximum}, not {value}")
    return value


def checked_event_name(value: str) -> str:
    """``value`` if it can name an event (storable text that fits the column), else a
    ``CommandError`` that does not echo a pasted megabyte back."""
    name = checked_text(value, "the event name")
    longest = Event._meta.get_field("name").max_length or 0
    if len(name) > longest:
        raise CommandError(
            f"the event name is {len(name)} characters; event names have {longest} at most"
        )
    return name


def checked_json(text: str, flag: str) -> Any:
    """``text`` parsed as JSON, else a ``CommandError`` naming ``flag``. Whether the
    value can be stored (depth, NaN) is the store's check, made when it is encoded."""
    try:
        return serde.parse_json(text, flag)
    except EverystepError as exc:
        raise CommandError(str(exc)) from None


def wait_text(wait: WaitReport, when: Callable[[datetime], str]) -> str:
    """A waiting run's wait in words, its times written by ``when``: "starts at T",
    "sleeps until T", "waits for event approval until T" (no "until" without a timeout),
    "waits for run ID", "waits for 3 runs" (the worker's log says it so too)."""
    until = "" if wait.until is None else when(wait.until)
    return in_words(wait.kind, until, wait.events)


def wait_json(wait: WaitReport | None) -> dict[str, Any] | None:
    """A run's wait as JSON-ready values (None when it does not wait)."""
    if wait is None:
        return None
    until = None if wait.until is None else wait.until.isoformat()
    return {"kind": wait.kind, "until": until, "events": wait.events or None}


# --- filters: acting on every run they match (bulk actions) ------------------------------

FILTER_FLAGS = (
    "workflow",
    "status",
    "created_after",
    "created_before",
    "runner",
    "parent",
    "queue",
)


def add_filter_arguments(parser: CommandParser) -> None:
    """The runs list's filters, ``--dry-run`` and ``--batch-size``: for a command that
    acts on one run by id or, with these flags instead, on every run they match."""
    group = parser.add_argument_group("bulk: every run these filters match, instead of a run id")
    group.add_argument("--workflow", metavar="NAME", help="runs of this workflow")
    group.add_argument("--status", help=f"runs in this status ({', '.join(Status.values)})")
    time = "YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS], the project's time zone unless an offset is given"
    group.add_argument(
        "--created-after", metavar="TIME", help=f"runs created at or after TIME ({time})"
    )
    group.add_argument("--created-before", metavar="TIME", help="runs created before TIME")
    group.add_argument("--runner", metavar="NAME", help="runs claimed by this runner")
    group.add_argument("--parent", metavar="RUN_ID", help="the runs this run's body started")
    group.add_argument("--queue", metavar="NAME", help="runs of Django tasks on this queue")
    group.add_argument(
        "--dry-run", action="store_true", help="print how many runs match; change nothing"
    )
    group.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help=f"runs per transaction (default {bulk.DEFAULT_BATCH_SIZE:,})",
    )


def run_or_filter(options: dict[str, Any]) -> str | bulk.RunFilter:
    """The run id (``options["run_id"]``) or the filter the flags give, checked: one of
    them, never both, never neither. A ``CommandError`` says what is wrong."""
    run_id = options.get("run_id")
    bulk_flags = [flag for flag in (*FILTER_FLAGS, "batch_size") if options.get(flag) is not None]
    if options.get("dry_run"):
        bulk_flags.append("dry_run")
    if run_id is not None and bulk_flags:
        shown_flags = ", ".join("--" + flag.replace("_", "-") for flag in bulk_flags)
        raise CommandError(f"give a run id or filter flags, not both (a run id and {shown_flags})")
    if run_id is not None:
        return checked_run_id(run_id)
    if not bulk_flags:
        raise CommandError(
            "give a run id, or filter flags (--workflow, --status, --created-after, "
            "--created-before, --runner, --parent, --queue) to act on every run they match"
        )
    return run_filter(options)


def run_filter(options: dict[str, Any]) -> bulk.RunFilter:
    """The filter the flags give, checked (a ``CommandError`` names the flag)."""
    status = _filter_text(options, "status")
    if status is not None and status not in Status.values:
        raise CommandError(f"unknown status {shown(status)}; valid: {', '.join(Status.values)}")
    after = _moment(options, "created_after")
    before = _moment(options, "created_before")
    if after is not None and before is not None and after >= before:
        raise CommandError("--created-after must be earlier than --created-before")
    parent = options.get("parent")
    try:
        return bulk.RunFilter(
            workflow=_filter_text(options, "workflow"),
            status=status,
            created_after=after,
            created_before=before,
            runner=_filter_text(options, "runner"),
            parent=None if parent is None else uuid.UUID(checked_run_id(parent)),
            queue=_filter_text(options, "queue"),
        )
    except EverystepError as exc:
        raise CommandError(str(exc)) from None


def batch_size(options: dict[str, Any]) -> int:
    """``--batch-size``, checked; the default when not given."""
    given = options.get("batch_size")
    if given is None:
        return bulk.DEFAULT_BATCH_SIZE
    return checked_count(given, "--batch-size", bulk.MAX_BATCH_SIZE)


def _filter_text(options: dict[str, Any], name: str) -> str | None:
    flag = "--" + name.replace("_", "-")
    value = checked_text(options.get(name), flag)
    if value is not None and not value.strip():
        raise CommandError(f"{flag} is empty")
    return value


def _moment(options: dict[str, Any], name: str) -> datetime | None:
    text = _filter_text(options, name)
    if text is None:
        return None
    try:
        return parse_moment(text.strip())
    except ValueError:
        flag = "--" + name.replace("_", "-")
        raise CommandError(
            f"{flag} {shown(text)} is not a time: write YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS] "
            "(the project's time zone), or add a UTC offset (+02:00)"
        ) from None


def runs_text(count: int) -> str:
    """``"1 run"``, ``"1,234 runs"``."""
    return f"{count:,} run" + ("" if count == 1 else "s")


def dry_run(options: dict[str, Any], run_filter: bulk.RunFilter, action: str) -> str | None:
    """With ``--dry-run``: what to print — how many runs ``action`` would touch (those the
    filter matches that the action applies to); None without it."""
    if not options.get("dry_run"):
        return None
    matched = bulk.count(run_filter, action)
    return f"{runs_text(matched)} match (filter {run_filter}); nothing changed"
