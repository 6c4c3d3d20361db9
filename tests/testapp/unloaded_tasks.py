"""A real @task in a module nobody imports at start-up (not an app's tasks.py, not in
EVERYSTEP_WORKFLOW_MODULES): a worker does not know it, and its runs fail once."""

from __future__ import annotations

from tests.testapp.import_marks import mark

try:  # Django 6
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]

mark(__name__)


@task
def forgotten(value: int) -> int:
    mark("unloaded_tasks.forgotten ran")
    return value
