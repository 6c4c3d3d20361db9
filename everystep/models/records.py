"""What a run records: its steps (``Step``), the events sent to it (``Event``), the runs
it awaits (``RunWait``) and the values it publishes (``Published``)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from everystep.models.base import EverystepModel
from everystep.models.runs import Workflow


class StepStatus(models.TextChoices):
    DONE = "done"
    FAILED = "failed"
    STARTED = "started"


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
    # The code version of the worker that recorded it: a replay that finds a record its
    # code would not make tells newer code (another version) from a change that broke
    # determinism (its own). NULL: written by hand, by a fork, or by an older release.
    code_version = models.CharField(max_length=64, null=True, blank=True)

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
