"""The tables everystep keeps: one ``Workflow`` row per run, one ``Step`` row per
executed step, one ``Event`` row per event sent to a run, one ``RunWait`` row per run a
waiting body awaits, one ``Published`` row per value a run publishes, one ``AuditEntry`` row
per operator action, one ``Runner`` row per live worker.

Import them from here (``from everystep.models import Workflow``); the modules split them
by job:

- ``ids``: ``uuid7``, the time-ordered run ids;
- ``base``: the manager and abstract base every table shares (everystep's own alias);
- ``runs``: ``Workflow``, its statuses, the fencing rule and the ``QuerySet`` of its
  status transitions;
- ``records``: what a run records: ``Step``, ``Event``, ``RunWait``, ``Published``;
- ``operators``: ``AuditEntry`` (the audit trail) and ``Runner`` (heartbeats).
"""

from __future__ import annotations

from everystep.models.base import EverystepModel, OwnDatabaseManager
from everystep.models.ids import uuid7
from everystep.models.operators import AuditEntry, Runner
from everystep.models.records import Event, Published, RunWait, Step, StepStatus
from everystep.models.runs import (
    FINAL_STATUSES,
    Status,
    Workflow,
    WorkflowManager,
    WorkflowQuerySet,
    fence,
    finish_fields,
    take_fields,
)

__all__ = [
    "FINAL_STATUSES",
    "AuditEntry",
    "Event",
    "EverystepModel",
    "OwnDatabaseManager",
    "Published",
    "RunWait",
    "Runner",
    "Status",
    "Step",
    "StepStatus",
    "Workflow",
    "WorkflowManager",
    "WorkflowQuerySet",
    "fence",
    "finish_fields",
    "take_fields",
    "uuid7",
]
