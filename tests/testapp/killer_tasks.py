"""A @task whose body kills its worker process outright (``os._exit``), for the recovery
limit; known to a worker only through EVERYSTEP_WORKFLOW_MODULES (tests.testapp.site)."""

from __future__ import annotations

import os

try:  # Django 6
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]


@task
def kill_worker() -> None:
    os._exit(1)
