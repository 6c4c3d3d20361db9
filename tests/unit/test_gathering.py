"""Under a backlog the claim loop lets a lone free slot wait a moment for others, so one
claim takes several runs; otherwise it claims for every free slot at once."""

from __future__ import annotations

import uuid

import pytest

from everystep.values import Claim
from everystep.worker import Worker, loop


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(loop.time, "monotonic", clock)
    return clock


def backlogged(pool_size: int = 8) -> Worker:
    worker = Worker(pool_size=pool_size, name="gatherer")
    worker._backlogged = True
    return worker


def test_a_lone_free_slot_waits_at_most_gather_seconds(clock):
    worker = backlogged()
    assert worker._gathering(1)
    # The loop sleeps only until the gathering ends, whatever its poll.
    assert worker._until_due(5.0) == pytest.approx(loop.GATHER)
    clock.now += loop.GATHER / 2
    assert worker._gathering(1)
    assert worker._until_due(5.0) == pytest.approx(loop.GATHER / 2)
    clock.now += loop.GATHER / 2
    assert not worker._gathering(1), "after GATHER seconds it claims for the one slot"
    assert worker._until_due(5.0) == 5.0


def test_a_quarter_of_the_pool_free_is_claimed_for_at_once(clock):
    worker = backlogged()
    assert worker._gathering(1)
    assert not worker._gathering(2)
    assert worker._until_due(5.0) == 5.0, "the gathering is over"


def test_without_a_backlog_every_free_slot_is_claimed_for_at_once(clock):
    worker = backlogged()
    worker._backlogged = False
    assert not worker._gathering(1)


def test_runs_already_held_start_without_waiting(clock):
    worker = backlogged()
    held = Claim(uuid.uuid4(), uuid.uuid4(), "gatherer")
    worker.state.backlog.append((0.0, held))
    assert not worker._gathering(1)


@pytest.mark.parametrize("pool_size", [1, 2, 3, 4])
def test_a_small_pool_never_gathers(clock, pool_size):
    assert not backlogged(pool_size)._gathering(1)
