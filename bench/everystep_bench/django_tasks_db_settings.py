"""``everystep_bench.settings`` plus django-tasks-db, for ``bench/peers/django_tasks_db_bench.py``
(run with the venv of ``bench/peers/setup-django-tasks-db.sh``, which has the package).

Two task backends on the one benchmark database: ``default`` is everystep's (as in
``tests/settings.py``), ``dtdb`` is django-tasks-db's ``DatabaseBackend`` with its
defaults (queue ``default``), which ``manage.py db_worker --backend dtdb`` serves.
"""

from __future__ import annotations

from everystep_bench.settings import *  # noqa: F403
from everystep_bench.settings import INSTALLED_APPS, TASKS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]

TASKS = {**TASKS, "dtdb": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

# The benchmark's tasks, known to every worker from its start (a worker imports nothing
# for a run's name; django-tasks-db's db_worker imports the module a row names).
EVERYSTEP_WORKFLOW_MODULES = ["everystep_bench.django_tasks_db_tasks"]
