"""The cap on a run's published keys (``MAX_KEYS``) holds per run, over every pass and
every process (issue 50, item 6): a step served from its record on a later pass
publishes nothing, so only the stored keys can tell that pass how many the run has."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from everystep import publish, published, schedule, sleep, step, workflow
from everystep.engine.operations.progress import MAX_KEYS
from everystep.models import Published, Status, Workflow
from everystep.store import published as store
from everystep.testing import run_due

pytestmark = pytest.mark.django_db(transaction=True)

FIRST = 60


@step
def publish_keys(prefix: str, count: int) -> int:
    for n in range(count):
        publish(f"{prefix}{n}", n)
    return count


@step(atomic=True)
def publish_keys_atomic(prefix: str, count: int) -> int:
    for n in range(count):
        publish(f"{prefix}{n}", n)
    return count


@step
def republish(key: str, value: str) -> str:
    publish(key, value)
    return value


@workflow(name="tests.progress_caps.keys_across_a_sleep")
def keys_across_a_sleep(then: int, atomic: bool) -> str:
    """``FIRST`` keys from a step, a durable sleep, ``then`` new keys from another step
    (atomic: through the writer thread on PostgreSQL and MariaDB), then ``a0`` again."""
    publish_keys("a", FIRST)
    sleep(3600)
    (publish_keys_atomic if atomic else publish_keys)("b", then)
    return republish("a0", "again")


def keys(run: Workflow) -> set[str]:
    return set(Published.objects.filter(workflow_id=run.id).values_list("key", flat=True))


def slept_then_woke(then: int, atomic: bool) -> Workflow:
    """A run of ``keys_across_a_sleep`` taken through its two passes."""
    run = schedule(keys_across_a_sleep, then, atomic)
    (asleep,) = run_due()
    assert asleep.status == Status.SCHEDULED, asleep.error
    assert len(keys(run)) == FIRST
    (woke,) = run_due(advance=3601)
    return woke


@pytest.mark.parametrize("atomic", [False, True], ids=["step", "atomic-step"])
def test_new_keys_after_a_resume_stop_at_the_cap(atomic):
    """60 keys, a durable sleep, 60 new keys: 100 are stored and the 101st fails the step
    with the cap's error."""
    run = slept_then_woke(FIRST, atomic)
    assert run.status == Status.FAILED
    assert run.error["type"] == "everystep.errors.EverystepError"
    assert f"more than {MAX_KEYS} keys" in run.error["message"]
    firsts = {f"a{n}" for n in range(FIRST)}
    if atomic and connection.vendor == "sqlite":
        # SQLite writes an atomic step's values in its transaction, which the failure
        # rolls back (docs/progress.md).
        assert keys(run) == firsts
    else:
        assert keys(run) == firsts | {f"b{n}" for n in range(MAX_KEYS - FIRST)}


@pytest.mark.parametrize("atomic", [False, True], ids=["step", "atomic-step"])
def test_a_stored_key_is_republished_at_the_cap(atomic):
    """With exactly 100 keys stored over two passes, publishing an existing key (new to
    that pass) still writes it."""
    run = slept_then_woke(MAX_KEYS - FIRST, atomic)
    assert run.status == Status.COMPLETED, run.error
    values = published(run)
    assert len(values) == MAX_KEYS
    assert values["a0"] == "again"
    assert Published.objects.get(workflow_id=run.id, key="a0").version == 2


THREADS = 4
ROUNDS = 3


def race(run: Workflow) -> list[str]:
    """``THREADS`` threads adding ``FIRST`` new keys each to ``run`` at once; the keys
    the cap refused."""
    start = threading.Barrier(THREADS)
    refused: list[str] = []
    errors: list[BaseException] = []

    def add(prefix: str) -> None:
        try:
            start.wait()
            for n in range(FIRST):
                if not store.write(run.id, f"{prefix}{n}", n, cap=MAX_KEYS):
                    refused.append(f"{prefix}{n}")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=add, args=(f"t{t}-",)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return refused


def test_writers_on_several_threads_together_store_exactly_the_cap():
    """Threads adding new keys to one run at once (each its own connection, as workers
    would): exactly 100 are stored and every other write is refused, round after round
    (the race is at the 100th key, so one round may miss it)."""
    for _ in range(ROUNDS):
        run = schedule(keys_across_a_sleep, 0, False)  # a run row to hang the values on
        refused = race(run)
        assert len(keys(run)) == MAX_KEYS
        assert len(refused) == THREADS * FIRST - MAX_KEYS
        assert not keys(run) & set(refused)


def test_a_capped_write_leaves_other_runs_alone():
    """A run at the cap refuses a new key; another run still takes one."""
    full, other = (schedule(keys_across_a_sleep, 0, False) for _ in range(2))
    for n in range(MAX_KEYS):
        assert store.write(full.id, f"k{n}", n, cap=MAX_KEYS)
    assert not store.write(full.id, "one-more", 0, cap=MAX_KEYS)
    assert store.write(full.id, "k0", "again", cap=MAX_KEYS)
    assert store.write(other.id, "one-more", 0, cap=MAX_KEYS)
    assert len(keys(full)) == MAX_KEYS and keys(other) == {"one-more"}
    assert published(full)["k0"] == "again"
