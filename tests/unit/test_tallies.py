"""Per-thread tallies (``everystep.tallies``): every update counted once, whichever
thread made it and whether that thread still runs when they are read."""

from __future__ import annotations

import threading

import pytest

from everystep.tallies import Tallies

BOUNDS = {"seconds": (0.1, 1.0)}


def test_counters_and_histograms_sum_over_threads_alive_and_ended():
    tallies = Tallies(BOUNDS)
    release = threading.Event()

    def work(stay: bool) -> None:
        for _ in range(1000):
            tallies.add(("runs", "flow"))
        tallies.observe(("seconds", "flow"), 0.05)
        tallies.observe(("seconds", "flow"), 0.1)  # on a bound: that bucket (le)
        tallies.observe(("seconds", "flow"), 3.0)
        if stay:
            release.wait(10)

    staying = [threading.Thread(target=work, args=(True,)) for _ in range(4)]
    ending = [threading.Thread(target=work, args=(False,)) for _ in range(4)]
    for thread in staying + ending:
        thread.start()
    for thread in ending:
        thread.join()
    tallies.add(("runs", "flow"), 5)
    tallies.add(("runs", "other"))
    try:
        read = tallies.read()
    finally:
        release.set()
        for thread in staying:
            thread.join()
    assert read[("runs", "flow")] == 8 * 1000 + 5
    assert read[("runs", "other")] == 1
    buckets, total = read[("seconds", "flow")]
    assert buckets == [16, 16, 24]  # cumulative: <= 0.1, <= 1.0, +Inf
    assert total == pytest.approx(8 * (0.05 + 0.1 + 3.0))
    assert tallies.read() == read, (
        "reading again, the ended threads' tallies folded, changes nothing"
    )


def test_the_tallies_of_ended_threads_are_folded_into_one():
    tallies = Tallies(BOUNDS)
    for _ in range(50):
        thread = threading.Thread(target=tallies.add, args=(("runs", "flow"),))
        thread.start()
        thread.join()
    assert tallies.read()[("runs", "flow")] == 50
    assert len(tallies._threads) <= 1, "only a live thread keeps a tally of its own"
