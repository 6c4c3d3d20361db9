"""The Django ``@task`` functions ``bench/peers/django_tasks_db_bench.py`` enqueues.

Each body does the same small piece of real work (a SHA-256 over 4 KiB derived from its
argument) and returns when it started (``time.time()`` in the worker) with the digest:
the benchmark reads the start back from the task's result for the pickup latency, and
checks the digest. ``plain`` is declared for everystep's backend (``default``); the
benchmark hands the very same task to django-tasks-db with ``plain.using(backend="dtdb")``,
so both backends run one function. ``durable`` does its work in one ``@step`` (recorded,
served on replay): everystep only. ``written`` and ``durable_written`` (``--body orm``)
also insert one row through the ORM, as most task bodies write something.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from typing import Any

from everystep import step

try:  # Django 6
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]

PAYLOAD_BYTES = 4096


def fingerprint(i: int) -> str:
    """The work: hash 4 KiB made from ``i`` (a few microseconds, no I/O)."""
    seed = hashlib.sha256(str(i).encode()).digest()
    return hashlib.sha256(seed * (PAYLOAD_BYTES // len(seed))).hexdigest()[:16]


@task
def plain(i: int) -> dict[str, Any]:
    started = time.time()
    return {"started": started, "digest": fingerprint(i)}


@step
def fingerprint_step(i: int) -> str:
    return fingerprint(i)


@task
def durable(i: int) -> dict[str, Any]:
    started = time.time()
    return {"started": started, "digest": fingerprint_step(i)}


def write_row(i: int) -> None:
    """One ORM insert, in its own transaction (autocommit), as a task body makes one."""
    from django.utils import timezone

    from tests.testapp.models import Execution

    Execution.objects.create(
        run_id=uuid.uuid4(), step=f"bench {i}", pid=os.getpid(), started_at=timezone.now()
    )


@task
def written(i: int) -> dict[str, Any]:
    started = time.time()
    write_row(i)
    return {"started": started, "digest": fingerprint(i)}


@step
def written_step(i: int) -> str:
    write_row(i)
    return fingerprint(i)


@task
def durable_written(i: int) -> dict[str, Any]:
    started = time.time()
    return {"started": started, "digest": written_step(i)}
