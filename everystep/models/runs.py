"""The runs table (``Workflow``): a run's statuses, the columns each transition writes,
the fencing rule, and the ``QuerySet`` whose methods are the transitions."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models import DateTimeField, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from everystep.models.base import EverystepModel, OwnDatabaseManager
from everystep.models.ids import uuid7
from everystep.values import Claim


class Status(models.TextChoices):
    SCHEDULED = "scheduled"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


FINAL_STATUSES = frozenset({Status.COMPLETED, Status.FAILED, Status.STOPPED, Status.CANCELLED})


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

if TYPE_CHECKING:
    from typing import Generic

    from typing_extensions import TypeVar

    # What a run's workflow returns: ``schedule(wf)`` is a ``Workflow[<what wf returns>]``
    # and ``result()`` of it that type. A bare ``Workflow`` is ``Workflow[Any]``, and a
    # run returning ``int`` is a run returning ``object`` (covariant).
    ResultT = TypeVar("ResultT", covariant=True, default=Any)

    class ResultTyped(Generic[ResultT]):
        """``Workflow``'s type parameter."""

else:
    from typing import TypeVar

    ResultT = TypeVar("ResultT", covariant=True)

    class ResultTyped:
        """``Workflow[int]`` is ``Workflow`` at run time, as ``QuerySet[...]`` is Django's
        ``QuerySet``: with ``typing.Generic`` among a model's bases, rendering the
        migration state of the models (``ProjectState.from_apps(apps).apps``, which
        builds each model class again from its bases) fails on a plain ``Generic``."""

        def __class_getitem__(cls, item: Any) -> type:
            return cls


class Workflow(EverystepModel, ResultTyped[ResultT]):
    """One run of a workflow: for type checkers ``Workflow[R]``, ``R`` what it returns."""

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
    # What ``Task.using()`` set for a task's run besides its queue: the backend alias and
    # ``run_after`` (ISO 8601), so ``get_result()`` gives back the task as enqueued.
    task_options = models.JSONField(null=True, blank=True)
    # The version of the code that scheduled the run (``everystep.code_version``): a worker
    # on other code leaves a run of a workflow it does not have for a worker that has it;
    # one on this very code (or for a row without it) fails it once, as unknown.
    code_version = models.CharField(max_length=64, null=True, blank=True)
    # The code version of the last worker that handed the run back unchanged, its
    # records showing code it does not have: no worker on that version claims it again.
    handed_back_by = models.CharField(max_length=64, null=True, blank=True)

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
            # Pruning walks finished runs by completion time (store/prune.py).
            models.Index(fields=["completed_at", "id"], name="everystep_wf_completed"),
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
