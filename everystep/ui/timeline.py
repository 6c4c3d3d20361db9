"""Where each step's bar sits on a run's timeline, as CSS percentages, how long things
took, as short human text, and when they happened, as ``<time>`` elements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Generic, Protocol, TypeVar

from django.utils.html import format_html
from django.utils.safestring import SafeString


class Timed(Protocol):
    @property
    def started_at(self) -> datetime: ...

    @property
    def finished_at(self) -> datetime | None: ...


T = TypeVar("T", bound=Timed)


@dataclass(frozen=True)
class Bar(Generic[T]):
    """One step's bar. ``left`` and ``width`` are percentages of the timeline's span,
    formatted with a dot whatever the locale, for a ``style`` attribute."""

    item: T
    left: str
    width: str
    duration: timedelta | None  # None while the step has no outcome


@dataclass(frozen=True)
class Timeline(Generic[T]):
    """The bars of a run's steps and the span they cover, from the first step's start."""

    bars: list[Bar[T]]
    span: timedelta


def build_timeline(
    items: Sequence[T], open_until: datetime, shown: Sequence[T] | None = None
) -> Timeline[T]:
    """Bars for ``items`` relative to the earliest start; a step without an outcome
    (an unsafe step in flight or left uncertain) runs until ``open_until``. With
    ``shown``, bars for those items only, still on the scale of all ``items`` (a page of
    a big run's steps keeps the run's time axis)."""
    if not items:
        return Timeline([], timedelta(0))
    origin = min(item.started_at for item in items)
    end = max(max(item.finished_at or open_until for item in items), origin)
    total = (end - origin).total_seconds()
    bars = []
    for item in items if shown is None else shown:
        stop = max(item.finished_at or open_until, item.started_at)
        left = _percent(item.started_at - origin, total)
        width = min(_percent(stop - item.started_at, total), 100.0 - left)
        duration = None if item.finished_at is None else stop - item.started_at
        bars.append(Bar(item, f"{left:.2f}", f"{width:.2f}", duration))
    return Timeline(bars, end - origin)


def _percent(delta: timedelta, total: float) -> float:
    if total <= 0:
        return 0.0
    return min(max(delta.total_seconds() / total * 100.0, 0.0), 100.0)


def format_duration(delta: timedelta | None) -> str:
    """``850 ms``, ``12.30 s``, ``4 min 5 s``, ``2 h 10 min``, ``3 d 4 h``; empty for None."""
    if delta is None:
        return ""
    seconds = max(delta.total_seconds(), 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


TIME = '<time datetime="{iso}">{text}</time>'


def time_html(value: datetime | None, zone: tzinfo) -> SafeString:
    """``value`` as ``_time.html`` writes it ("" for None), formatted here: on pages of
    hundreds of rows (every step of a run, a page of the runs list) the template's include
    and date filter per cell were a third of the page's time or more."""
    if value is None:
        return SafeString()
    iso = value.astimezone(zone).isoformat()
    return format_html(TIME, iso=iso, text=f"{iso[:10]} {iso[11:19]}")


def settled_html(by: str, at: datetime | None, zone: tzinfo) -> SafeString:
    """ "settled by alice (UI) at <time>": what a step settled by an operator shows in
    place of a duration (its span is how long it waited for a human, not how long it
    took)."""
    return format_html("settled by {} at {}", by, time_html(at, zone))
