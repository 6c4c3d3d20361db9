"""Reading what a run published: ``published(run)`` at once, ``watch(run)`` as it
changes, on the caller's thread (``awatch``, its async twin, shares the process's
wake-up: ``everystep.waiting.waiters``).

A watch compares one small state per run — its status and ``(keys, writes)`` of its
values (``store.published.states``) — and reads the values only when that changed.
On PostgreSQL it LISTENs for the writers' batched NOTIFY and for the run's end (marked
awaited, as a blocking ``result()`` marks it); elsewhere it polls, 50 ms at first after
a change, then less often, up to once a second. The status is read before the values,
so the values read once the run is final are its final values: the last yield.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any
from uuid import UUID

from everystep import serde, shapes
from everystep.engine.operations.results import run_ids
from everystep.engine.operations.waits import as_delay
from everystep.errors import EverystepError, StoreUnavailable, WaitTimeout
from everystep.models import FINAL_STATUSES, Workflow
from everystep.store import published as store
from everystep.store import run_waits
from everystep.store.wake import PUBLISHED_CHANNEL, EndedListener
from everystep.waiting.blocking import in_transaction

_POLL_FIRST, _POLL_MOST = 0.05, 1.0


def published(run: Workflow | UUID | str) -> dict[str, Any]:
    """The latest value of every key run ``run`` published."""
    (run_id,) = run_ids([run], "published()")
    try:
        values = store.snapshot(run_id)
    except StoreUnavailable as exc:
        raise EverystepError(f"published(): {exc}") from exc
    if values is None:
        raise EverystepError(f"published(): no run with id {run_id}")
    return values


def watch(
    run: Workflow | UUID | str, timeout: timedelta | float | None = None
) -> Iterator[dict[str, Any]]:
    """Yield run ``run``'s values at once, then each time they change; end after the
    run is final, having yielded its final values. Past ``timeout`` a ``WaitTimeout``."""
    (run_id,) = run_ids([run], "watch()")
    limit = None if timeout is None else as_delay(timeout, "watch() timeout")
    return _watch(run_id, limit)


def _watch(run_id: UUID, limit: timedelta | None) -> Iterator[dict[str, Any]]:
    deadline = None if limit is None else time.monotonic() + limit.total_seconds()
    try:
        state = _state(run_id)
        last = published(run_id)
        yield last
        if state[0] in FINAL_STATUSES:
            return
        refusal = in_transaction("watch()")
        if refusal is not None:
            raise EverystepError(refusal)
        with EndedListener(PUBLISHED_CHANNEL) as listener:
            if listener.listening:
                run_waits.mark_awaited([run_id])  # so that its end sends a NOTIFY too
            pause = _POLL_FIRST
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise WaitTimeout(f"watch(): run {run_id} had not ended within {limit}")
                listener.wait(pause if left is None else min(pause, left))
                seen = _state(run_id)
                if seen == state:
                    pause = min(pause * 2, _POLL_MOST)
                    continue
                state, pause = seen, _POLL_FIRST
                values = published(run_id)
                if values != last:
                    last = values
                    yield values
                if state[0] in FINAL_STATUSES:
                    return
    except StoreUnavailable as exc:
        raise EverystepError(f"watch(): {exc}") from exc


def decoded(run_id: UUID, stored: dict[str, Any], what: str) -> dict[str, Any]:
    """Run ``run_id``'s values, read in their stored form, rebuilt one key at a time, as
    ``published()`` rebuilds them (a value whose type is gone is shown as stored); one
    that fails otherwise is an ``EverystepError`` for this reader alone (``awatch``'s hub
    decodes for each watcher apart: one run's bad value must not fail the others)."""
    values = {}
    for key, value in stored.items():
        try:
            values[key] = serde.decode(value)
        except EverystepError:
            values[key] = value
        except Exception as exc:
            raise EverystepError(
                f"{what}: run {run_id}'s published value {key!r} cannot be rebuilt: {exc!r}"
            ) from exc
    return values


def typed(values: dict[str, Any], types: Mapping[str, Any] | None) -> dict[str, Any]:
    """``values`` (as ``published()`` reads them) with the keys ``types`` names rebuilt as
    those types (``everystep.shapes``); a value that does not fit is an
    ``IncompatibleValue`` naming the key."""
    if not types:
        return values
    out = dict(values)
    for key, hint in types.items():
        shape = shapes.of(hint)
        if shape is not None and key in out:
            out[key] = shape.rebuild(out[key], f"the value published under {key!r}")
    return out


def _state(run_id: UUID) -> store.State:
    state = store.states([run_id]).get(run_id)
    if state is None:
        raise EverystepError(f"watch(): no run with id {run_id}")
    return state
