"""What operators see beside the runs: the audit trail of their actions (``AuditEntry``)
and the live workers' heartbeat rows (``Runner``)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from everystep.models.base import EverystepModel
from everystep.models.runs import Workflow


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
    # Where ``pid`` names a process: the kernel's boot and the pid namespace (containers on
    # one host share its name, not their pids). A worker starting on the same host, in
    # the same space, can tell for certain that the holder's process is gone. NULL: not
    # known (not Linux, or an older release), so never taken as proof.
    process_space = models.CharField(max_length=100, blank=True, null=True)
    # The holder's heartbeat interval, in seconds: a worker watching the name waits two of
    # the holder's beats, not two of its own. NULL: an older release's row.
    heartbeat = models.FloatField(blank=True, null=True)
    # The holder's code version and the run names it carries (its workflows and tasks):
    # which due runs no live worker can carry. NULL: an older release's row.
    code_version = models.CharField(max_length=64, blank=True, null=True)
    carries = models.JSONField(blank=True, null=True)

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
