"""Counts and histograms kept per thread, without a lock, and summed when read.

A busy worker counts every step and every run (``everystep.metrics``). prometheus-client's
counters and histograms take a lock and check their labels on every update, which at two
updates per step came to about 5 % of the worker's client instructions. Here each thread
adds to a dict of its own, which no other thread writes; a reader (a scrape, a few times
a minute) sums every thread's dict. The dicts of threads that have ended (fork branch
threads come and go) are folded into one, so they do not pile up.
"""

from __future__ import annotations

import threading
import weakref
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

#: A tallied series: the metric's key, then its label values.
Key = tuple[str, ...]


class Tallies:
    """Counters (``add``) and histograms (``observe``), each series named by a ``Key``."""

    def __init__(self, bounds: dict[str, Sequence[float]]) -> None:
        # Each histogram's bucket upper bounds, by metric key, ascending, without +Inf.
        self.bounds = {metric: tuple(map(float, upper)) for metric, upper in bounds.items()}
        self._local = threading.local()
        self._lock = threading.Lock()  # guards _threads and _ended, never an update
        self._threads: list[tuple[weakref.ref[threading.Thread], dict[Key, Any]]] = []
        self._ended: dict[Key, Any] = {}

    def add(self, key: Key, amount: float = 1) -> None:
        """Add ``amount`` to the counter ``key``."""
        mine = self._mine()
        mine[key] = mine.get(key, 0) + amount

    def observe(self, key: Key, value: float) -> None:
        """Count ``value`` in the histogram ``key`` (its metric is ``key[0]``)."""
        mine = self._mine()
        slot = mine.get(key)
        upper = self.bounds[key[0]]
        if slot is None:
            # A count per bucket (the last one is +Inf), then the sum of the values.
            slot = mine[key] = [0] * (len(upper) + 1) + [0.0]
        slot[bisect_left(upper, value)] += 1  # the first bucket whose bound is >= value
        slot[-1] += value

    def read(self) -> dict[Key, Any]:
        """Every series summed over the threads: a counter's total; a histogram's
        ``(cumulative counts per bucket, +Inf last; sum)``."""
        with self._lock:
            self._fold_ended()
            # A dict copy is one step for the interpreter: no update interleaves with it.
            parts = [self._ended, *(tally.copy() for _, tally in self._threads)]
            total = _merge(parts)
        out: dict[Key, Any] = {}
        for key, value in total.items():
            if isinstance(value, list):
                counts, running = [], 0
                for count in value[:-1]:
                    running += count
                    counts.append(running)
                out[key] = (counts, value[-1])
            else:
                out[key] = value
        return out

    def _mine(self) -> dict[Key, Any]:
        try:
            return self._local.tally
        except AttributeError:
            tally: dict[Key, Any] = {}
            self._local.tally = tally
            with self._lock:
                self._fold_ended()
                self._threads.append((weakref.ref(threading.current_thread()), tally))
            return tally

    def _fold_ended(self) -> None:
        # A thread that has ended writes no more: its tally joins the ended threads' one.
        ended = [t for t in self._threads if not _alive(t[0])]
        if ended:
            self._ended = _merge([self._ended, *(tally for _, tally in ended)])
            self._threads = [t for t in self._threads if _alive(t[0])]


def _alive(ref: weakref.ref[threading.Thread]) -> bool:
    thread = ref()
    return thread is not None and thread.is_alive()


def _merge(parts: list[dict[Key, Any]]) -> dict[Key, Any]:
    """The series of ``parts`` added up, in new lists (the parts' own may still change)."""
    total: dict[Key, Any] = {}
    for part in parts:
        for key, value in part.items():
            have = total.get(key)
            if isinstance(value, list):
                snapshot = list(value)
                total[key] = (
                    snapshot
                    if have is None
                    else [a + b for a, b in zip(have, snapshot, strict=True)]
                )
            else:
                total[key] = value if have is None else have + value
    return total
