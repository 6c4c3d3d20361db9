"""The traceback text stored beside a failed step's or run's encoded exception.

Written for the operator reading a failure later, not for a debugger: the frames of the
user's code are kept, runs of everystep's own, Django's and the standard library's
frames are collapsed to one line, a recursion's repeated frame is counted instead of
printed, and the whole text is bounded (``MAX_BYTES``). When it must be cut, its start
goes: the end holds the raising frame and the error itself.

An exception rebuilt from a record (a replayed step's failure) carries the text it was
recorded with, and that is its traceback from then on: a replay does not add a second
one made of the replay's own frames.
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
import traceback
from collections.abc import Iterator
from types import TracebackType
from typing import Any

# At most this many bytes of UTF-8 text: a failure in a tight loop must not store
# megabytes per step.
MAX_BYTES = 64 * 1024
# One exception's own message lines (its full message is also the error's "message").
MAX_MESSAGE = 4 * 1024
# Links of a chain (``raise … from …``, an error while handling another) and members of
# an exception group, at most: a compact account, not every exception ever involved.
MAX_CHAIN = 8
MAX_GROUP = 5
# Identical consecutive frames shown before they are counted (as Python does).
REPEATS_SHOWN = 3

_RECORDED = "__everystep_traceback__"
_STOP_STEP = "__everystep_step_id__"

_CAUSE = "The above exception was the direct cause of the following exception:"
_CONTEXT = "During handling of the above exception, another exception occurred:"


def recorded(exc: BaseException, text: object) -> None:
    """Give an exception rebuilt from a record the traceback it was recorded with."""
    if isinstance(text, str):
        setattr(exc, _RECORDED, text)


def stopped_in(exc: BaseException, step_id: str) -> None:
    """Note that ``exc`` (a ``Terminal``) was raised inside step ``step_id``."""
    setattr(exc, _STOP_STEP, step_id)


def stop_step(exc: BaseException) -> str | None:
    """The step ``exc`` was raised in, if ``stopped_in`` said so."""
    step_id = getattr(exc, _STOP_STEP, None)
    return step_id if isinstance(step_id, str) else None


def stopped_at(status: str, error: dict[str, Any], step_ids: list[str]) -> str | None:
    """The step a blocked run waits on, or a stopped run stopped at: the step its error
    names (the uncertain step, the step that raised ``Terminal``), else for a stop in
    the body the last step recorded (``step_ids`` in the order they started)."""
    if status not in ("blocked", "stopped"):
        return None
    named = error.get("step_id")
    if isinstance(named, str):
        return named
    return step_ids[-1] if status == "stopped" and step_ids else None


def traceback_text(exc: BaseException) -> str | None:
    """``exc``'s traceback and its chained causes, compact but not yet ``bounded``; None
    for an exception that was never raised (nothing to show but its message)."""
    if not _has_trace(exc):
        return None
    return "\n".join(_chain(exc, set()))


def bounded(text: str, limit: int = MAX_BYTES) -> str:
    """``text`` cut to ``limit`` bytes of UTF-8 by dropping its start, at a line
    boundary, with a first line saying so."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    note = (
        "[traceback cut: its first {:,} bytes are left out; the end, where it was raised, is kept]"
    )
    room = limit - len(note.format(len(data))) - 1
    kept = data[len(data) - room :].decode("utf-8", "ignore")
    kept = kept[kept.find("\n") + 1 :] if "\n" in kept else kept
    return note.format(len(data) - len(kept.encode("utf-8"))) + "\n" + kept


def _has_trace(exc: BaseException) -> bool:
    return isinstance(getattr(exc, _RECORDED, None), str) or exc.__traceback__ is not None


def _chain(exc: BaseException, seen: set[int]) -> list[str]:
    """The lines of ``exc`` and what it was chained from, the oldest first."""
    links: list[tuple[BaseException, str | None]] = []  # newest first, each with its link
    current: BaseException | None = exc
    link: str | None = None
    while current is not None and id(current) not in seen and len(links) < MAX_CHAIN:
        seen.add(id(current))
        links.append((current, link))
        if isinstance(getattr(current, _RECORDED, None), str):
            break  # its recorded text already holds what it was chained from
        current, link = _next_link(current)
    lines: list[str] = []
    for item, link_text in reversed(links):
        lines += _one(item, seen)
        if link_text:
            lines.append(link_text)
    return lines


def _next_link(exc: BaseException) -> tuple[BaseException | None, str | None]:
    if exc.__cause__ is not None:
        return exc.__cause__, _CAUSE
    if exc.__context__ is not None and not exc.__suppress_context__:
        return exc.__context__, _CONTEXT
    return None, None


def _one(exc: BaseException, seen: set[int]) -> list[str]:
    """One exception: its frames and its type and message (or its recorded text)."""
    recorded_text = getattr(exc, _RECORDED, None)
    if isinstance(recorded_text, str):
        # Only the recorded text: what lies above the step call differs with the pass
        # that raised it on (which branch's error won, on which thread), and the run's
        # stored outcome must not depend on which pass gave it.
        return [recorded_text]
    lines = []
    if exc.__traceback__ is not None:
        lines.append("Traceback (most recent call last):")
        lines += _frames(exc.__traceback__)
    lines += _message(exc)
    members = exc.exceptions if isinstance(exc, BaseExceptionGroup) else ()
    for index, member in enumerate(members[:MAX_GROUP], 1):
        lines.append(f"[member {index} of {len(members)} of the group]")
        lines += _chain(member, seen)
    return lines


def _message(exc: BaseException) -> list[str]:
    try:
        text = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")
    except Exception:  # a __str__ that raises: the type is still worth showing
        text = f"{type(exc).__module__}.{type(exc).__qualname__}: <message not readable>"
    if len(text) > MAX_MESSAGE:
        text = f"{text[:MAX_MESSAGE]}… [message cut: {len(text):,} characters]"
    return [text]


def _frames(tb: TracebackType) -> list[str]:
    """The frames, outermost first: runs of library frames collapsed, a repeated frame
    counted; the last frame (where it was raised) is always shown."""
    entries = list(traceback.walk_tb(tb))
    lines: list[str] = []
    hidden: list[str] = []
    previous, repeats = None, 0
    for position, (frame, lineno) in enumerate(entries):
        filename, name = frame.f_code.co_filename, frame.f_code.co_name
        library = _library_name(filename) if position < len(entries) - 1 else ""
        if library:
            hidden.append(library)
            continue
        if hidden:
            lines.append(_hidden_line(hidden))
            hidden, previous = [], None
        repeats = repeats + 1 if (filename, lineno, name) == previous else 0
        previous = (filename, lineno, name)
        if repeats < REPEATS_SHOWN:
            lines += _frame_lines(filename, lineno, name, frame.f_globals)
            continue
        if repeats > REPEATS_SHOWN:  # one line however deep the recursion: count again
            lines.pop()
        count = repeats - REPEATS_SHOWN + 1
        lines.append(f"  [previous frame repeated {count} more time{'s' if count > 1 else ''}]")
    return lines + ([_hidden_line(hidden)] if hidden else [])


def _hidden_line(hidden: list[str]) -> str:
    kinds = ", ".join(dict.fromkeys(hidden))
    return f"  [{len(hidden)} frame{'s' if len(hidden) > 1 else ''} of {kinds} left out]"


def _frame_lines(filename: str, lineno: int | None, name: str, globs: dict[str, Any]) -> list[str]:
    where = f'  File "{filename}", line {lineno}, in {name}'
    source = linecache.getline(filename, lineno or 0, globs).strip()
    return [where, f"    {source}"] if source else [where]


def _library_name(filename: str) -> str:
    """Which code a frame's file belongs to when it is not the user's: "everystep",
    "django", "asgiref" or "the standard library"; "" for the user's (and other
    packages')."""
    if filename.startswith("<frozen "):
        return "the standard library"
    for prefix, name in _library_roots():
        if filename.startswith(prefix):
            return name
    return ""


def _library_roots() -> Iterator[tuple[str, str]]:
    """(folder, whose code) in the order to test them; "" for installed packages, which
    a virtualenv keeps inside the standard library's folder (platstdlib)."""
    # Looked up on each use, not at import: Django may be imported later (and
    # ``import everystep`` must not import it).
    yield os.path.dirname(__file__) + os.sep, "everystep"
    # asgiref: the threads an async body's sync work runs on
    # (everystep.engine.asynchronous.offload).
    for package in ("django", "asgiref"):
        package_file = getattr(sys.modules.get(package), "__file__", None)
        if package_file:
            yield os.path.dirname(package_file) + os.sep, package
    paths = sysconfig.get_paths()
    for key in ("purelib", "platlib"):
        yield paths[key] + os.sep, ""
    for key in ("stdlib", "platstdlib"):
        yield paths[key] + os.sep, "the standard library"
