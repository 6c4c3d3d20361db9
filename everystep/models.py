"""The tables everystep keeps: one ``Workflow`` row per run, one ``Step`` row per
executed step, one ``Event`` row per event sent to a run, one ``RunWait`` row per run a
waiting body awaits, one ``Runner`` row per live worker."""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any

from django.db import models
from django.db.models import DateTimeField, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from everystep import conf
from everystep.values import Claim

_uuid7_lock = threading.Lock()
_uuid7_last = (0, 0)  # (millisecond, counter) of the last id made in this process
_UUID7_COUNTER_MAX = 0xFFF  # the 12 bits of rand_a


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7).

    Run ids sort by creation time, so the primary key index serves both the claim order
    and the "most recent runs" listing, and the UI's created-after/before window is an id
    range. Within one process ids stay strictly increasing: ids made in the same
    millisecond count up in ``rand_a`` (RFC 9562 §6.2, method 1), so the time in an id
    stays the clock's unless a process makes more than 4,096 in one millisecond.
    """
    global _uuid7_last
    with _uuid7_lock:
        now_ms = time.time_ns() // 1_000_000
        last_ms, counter = _uuid7_last
        if now_ms > last_ms:
            last_ms, counter = now_ms, 0
        elif counter < _UUID7_COUNTER_MAX:
            counter += 1  # same millisecond, or the clock stepped back
        else:
            last_ms, counter = last_ms + 1, 0
        _uuid7_last = (last_ms, counter)
    rand = int.from_bytes(os.urandom(8), "big")
    value = (last_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)


class Status(models.TextChoices):
    SCHEDULED = "scheduled"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


FINAL_STATUSES = frozenset({Status.COMPLETED, Status.FAILED, Status.STOPPED, Status.CANCELLED})


class StepStatus(models.TextChoices):
    DONE = "done"
    FAILED = "failed"
    STARTED = "started"


def fence(claim: Claim) -> dict[str, Any]:
    """The fencing rule, as column values: a write made for a claimed run applies only
    while the run is still ``running`` under the token it was claimed with, so a stale
    worker cannot overwrite the work of a newer claimer (or undo a cancel or requeue)."""
    return {"id": claim.run_id, "claim_token": claim.token, "status": Status.RUNNING}


def take_fields(runner: str, token: uuid.UUID, now: Any) -> dict[str, Any]:
    """What a claim writes (besides ``started_at``, set on the first claim only). A run
    that waited no longer does once claimed: a new wait sets ``waiting_for`` again."""
    return {
        "status": Status.RUNNING,
        "claimed_by": runner,
        "claim_token": token,
        "updated_at": now,
        "waiting_for": None,
    }


def finish_fields(status: str, result: Any, error: Any, now: Any) -> dict[str, Any]:
    """What an outcome writes: the status, the result or error, the claim released."""
    return {
        "status": status,
        "result": result,
        "error": error,
        "claim_token": None,
        "updated_at": now,
        "completed_at": now if status in FINAL_STATUSES else None,
    }


class OwnDatabaseManager(models.Manager[Any]):
    """A manager whose querysets name everystep's alias (``EVERYSTEP_DATABASE``), so a
    project's router never sends an everystep read to a replica, or a write elsewhere.
    An alias given explicitly (``db_manager``, Django's deletion collector) still wins."""

    def get_queryset(self) -> models.QuerySet[Any]:
        queryset = super().get_queryset()
        return queryset if self._db else queryset.using(conf.database())


class EverystepModel(models.Model):
    """The base of everystep's tables: every query and write goes to everystep's alias,
    whatever a router says."""

    objects = OwnDatabaseManager()

    class Meta:
        abstract = True
        # Forward relations (``step.workflow``) and ``refresh_from_db`` go through the base
        # manager; Django takes a model's from its first parent's, so naming it here pins
        # them without an option on each table (which a migration would have to record).
        base_manager_name = "objects"

    def save(self, *args: Any, using: str | None = None, **kwargs: Any) -> None:
        # Model.save asks the router, not the manager, where an instance goes.
        super().save(*args, using=using or conf.database(), **kwargs)

    def delete(
        self, using: str | None = None, keep_parents: bool = False
    ) -> tuple[int, dict[str, int]]:
        return super().delete(using=using or conf.database(), keep_parents=keep_parents)


class WorkflowQuerySet(models.QuerySet["Workflow"]):
    """The transitions of a run's status; callers say which one they want, and each
    states its ``UPDATE`` once here. Each returns the number of rows it changed."""

    def held_by(self, claim: Claim) -> WorkflowQuerySet:
        """The run of ``claim``, if the claim still holds it (see ``fence``)."""
        return self.filter(**fence(claim))

    def take(self, runner: str, token: uuid.UUID) -> int:
        """Claim these runs for ``runner`` under ``token``."""
        now = timezone.now()
        first_claim = Coalesce("started_at", Value(now, output_field=DateTimeField()))
        return self.update(**take_fields(runner, token, now), started_at=first_claim)

    def requeue(self, **also: Any) -> int:
        """Put these runs back to ``scheduled`` with their claim released, so any runner
        may take them; a new claim token fences out the old holder's late writes.
        ``also``: more columns to set in the same statement."""
        return self.update(
            status=Status.SCHEDULED,
            claimed_by=None,
            claim_token=None,
            error=None,
            completed_at=None,
            updated_at=timezone.now(),
            **also,
        )

    def finish(self, status: str, *, result: Any = None, error: Any = None) -> int:
        """Give these runs an outcome: a final status, or ``blocked`` (not final: a human
        settles it and the run is requeued)."""
        return self.update(**finish_fields(status, result, error, timezone.now()))

    def unfinished(self) -> WorkflowQuerySet:
        return self.exclude(status__in=FINAL_STATUSES)


WorkflowManager = OwnDatabaseManager.from_queryset(WorkflowQuerySet)


class Workflow(EverystepModel):
    """One run of a workflow."""

    objects = WorkflowManager()  # type: ignore[misc]  # a narrower manager, as Django allows

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    name = models.CharField(max_length=255)
    args = models.JSONField(default=list)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.SCHEDULED)
    claimed_by = models.CharField(max_length=255, null=True, blank=True)
    # Fencing: a fresh token per claim. Every write for a run is conditional on the
    # token it was claimed with, so a stale worker cannot overwrite a newer claimer.
    claim_token = models.UUIDField(null=True, blank=True, editable=False)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # Last time the claim holder wrote for this run (claim, step record, finish).
    updated_at = models.DateTimeField(auto_now=True)
    # Times the run was taken back from a worker that died holding it (a restart under
    # the same name, orphan recovery): past EVERYSTEP_MAX_RECOVERIES the run is failed,
    # so a step that kills its worker cannot crash workers forever.
    recoveries = models.PositiveIntegerField(default=0)
    # When a scheduled run may be claimed: its creation, a delayed start, the wake time of
    # a sleep, the deadline of a wait (NULL: an event with no timeout). Claims take only
    # runs with due_at <= now, in due_at order.
    due_at = models.DateTimeField(null=True, blank=True, default=timezone.now)
    # The events a waiting run awaits (comma-separated), for operators and for ``send``.
    waiting_for = models.CharField(max_length=255, null=True, blank=True)
    # The run whose body started this one with ``everystep.start`` (a child run).
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    # Someone waits for this run's end (a body's ``result``/``gather``, a blocking
    # ``result()``): its outcome also wakes them. Set by the waiter before it waits, read
    # back by the outcome's own statement, so runs nobody awaits pay nothing for it.
    awaited = models.BooleanField(default=False)
    # The run this one was forked from (``everystep.fork``): it began with copies of that
    # run's records made before ``forked_from_step``, the step it executes from.
    forked_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    forked_from_step = models.CharField(max_length=300, null=True, blank=True)
    # A run of a Django ``@task`` (``everystep.tasks``): the task's queue (NULL for every
    # other run), the attempts so far — one ``{"worker", "at"}`` per claim that was not a
    # resume — and whether the next claim resumes after a durable wait (not an attempt).
    queue = models.CharField(max_length=255, null=True, blank=True)
    attempts = models.JSONField(null=True, blank=True)
    resumes = models.BooleanField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["name", "idempotency_key"], name="everystep_unique_idempotency_key"
            ),
        ]
        indexes = [
            # UI filters by status, newest first. ``claimed_by`` last: the runners page
            # counts the running runs per holder from this index alone (reading each row
            # took 290 ms on MariaDB at a million runs, bench/ui_scale.py).
            models.Index(fields=["status", "id", "claimed_by"], name="everystep_wf_status_holder"),
            # Claim query: status='scheduled' AND due_at <= now ORDER BY due_at, id; runs
            # sleeping or waiting sort after everything due, so the claim never walks them.
            models.Index(fields=["status", "due_at", "id"], name="everystep_wf_due"),
            # Catchup and orphan recovery: runs held by one runner. ``name`` last: the runs
            # page's status counts for a workflow and a runner read this index alone.
            models.Index(fields=["claimed_by", "status", "name"], name="everystep_wf_claimed_name"),
            models.Index(fields=["name", "id"], name="everystep_wf_name_id"),
            # The runs page's status counts for one workflow (name AND status, capped):
            # without it a busy workflow's counts walk its whole history (seconds on
            # MariaDB at a million runs, bench/ui_scale.py).
            models.Index(fields=["name", "status", "id"], name="everystep_wf_name_status_id"),
            # UI search by idempotency key alone (the unique constraint leads with name).
            models.Index(fields=["idempotency_key"], name="everystep_wf_key"),
        ]
        # The UI's write actions; the admin stays read-only whatever the user's rights.
        permissions = [
            ("cancel_workflow", "Can cancel runs"),
            ("requeue_workflow", "Can requeue running runs"),
            ("resolve_workflow", "Can settle the uncertain step of blocked runs"),
            ("send_event", "Can send events to waiting runs"),
            ("fork_workflow", "Can fork runs (re-run them from a step)"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.id} ({self.status})"


class Step(EverystepModel):
    """The recorded outcome (or, for an unsafe step, the start) of one step call."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="steps")
    step_id = models.CharField(max_length=300)
    name = models.CharField(max_length=255)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=StepStatus.choices)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # Who settled this step's outcome by hand (``everystep_resolve_step``, the UI), at
    # ``finished_at``; NULL for an outcome the step's own body gave.
    settled_by = models.CharField(max_length=255, null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workflow", "step_id"], name="everystep_unique_step"),
        ]

    def __str__(self) -> str:
        return f"{self.step_id} {self.name} ({self.status})"


class Event(EverystepModel):
    """An event sent to a run (``everystep.send``): kept until the run's ``wait_for`` of
    that name takes it; one per (run, name), the first payload wins."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="events")
    name = models.CharField(max_length=255)
    payload = models.JSONField(null=True, blank=True)
    sent_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workflow", "name"], name="everystep_unique_event"),
        ]

    def __str__(self) -> str:
        return f"{self.name} for {self.workflow_id}"


class RunWait(EverystepModel):
    """One run a waiting body awaits (``result``, ``gather``): the waiter is woken once
    no row of its own is left (each awaited run's end deletes its rows)."""

    waiter = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="awaits")
    awaited_run = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="awaited_by")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["waiter", "awaited_run"], name="everystep_unique_run_wait"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.waiter_id} awaits {self.awaited_run_id}"


class Published(EverystepModel):
    """The latest value a run published under one key (``everystep.publish``): what a
    page showing the run's progress reads. ``version`` counts the key's writes, so a
    watcher sees that a run's values changed from one small read per run (the sum of its
    versions) before it reads them."""

    # No constraint in the database: its check would lock the run's row, which an atomic
    # step's transaction holds (MariaDB), and the value must be visible before that
    # commits. The rows still go with their run: Django's cascade deletes them.
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, related_name="published", db_constraint=False
    )
    key = models.CharField(max_length=200)
    value = models.JSONField(null=True, blank=True)
    version = models.BigIntegerField(default=1)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workflow", "key"], name="everystep_unique_published"),
        ]

    def __str__(self) -> str:
        return f"{self.key} of {self.workflow_id}"


class AuditEntry(EverystepModel):
    """One write action an operator took, from the UI or a command: who, when, what, on
    which runs (one run, a few, or a filter with the count it matched), and why."""

    at = models.DateTimeField(default=timezone.now)
    action = models.CharField(max_length=32)
    # The Django user's name (UI), or "command" with the OS user (management commands).
    actor = models.CharField(max_length=255)
    via = models.CharField(max_length=64)  # "ui", or the command's name
    # The one run the action named; the entry is deleted with it (pruning).
    run = models.ForeignKey(
        Workflow, null=True, blank=True, on_delete=models.CASCADE, related_name="audit"
    )
    # Several runs: their ids (the first ``audit.RUN_IDS_KEPT``) and how many there were;
    # or the filter a bulk action used and how many runs it touched.
    run_ids = models.JSONField(default=list, blank=True)
    filter = models.JSONField(null=True, blank=True)
    count = models.PositiveIntegerField(default=0)
    reason = models.TextField(blank=True, default="")
    # What else the action took: a step id and mode, an event name, a fork's new run.
    detail = models.JSONField(default=dict, blank=True)
    # The UI confirmation a bulk action was taken under (``ui.actions.confirmation_key``):
    # unique, so two requests sending one confirmation at once make one entry.
    confirmation = models.CharField(max_length=255, null=True, blank=True, unique=True)

    class Meta:
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["at"], name="everystep_audit_at")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action} by {self.actor}"


class Runner(EverystepModel):
    """A live (or recently live) worker process: its heartbeat row."""

    name = models.CharField(max_length=255, unique=True)
    boot_id = models.UUIDField()
    pool_size = models.PositiveIntegerField()
    inflight = models.PositiveIntegerField(default=0)
    draining = models.BooleanField(default=False)
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    # The process beating under the name, so a worker refused the name can say which one
    # holds it. NULL: a row written by a release that did not record them.
    host = models.CharField(max_length=255, blank=True, null=True)
    pid = models.PositiveIntegerField(blank=True, null=True)

    class Meta:
        # Its own Meta: one inherited from EverystepModel would record the base manager
        # as an option of this table (a migration). EverystepModel pins it anyway.
        pass

    def __str__(self) -> str:
        return f"{self.name} ({self.inflight}/{self.pool_size})"

    def seconds_silent(self) -> float:
        """Seconds since this runner's last heartbeat."""
        return (timezone.now() - self.last_seen).total_seconds()

    def may_be_alive(self, orphan_timeout: float, heartbeat: float) -> bool:
        """Heard from too recently to be taken for dead: within the orphan timeout, and
        never within two heartbeat intervals."""
        return self.seconds_silent() < max(orphan_timeout, 2 * heartbeat)
