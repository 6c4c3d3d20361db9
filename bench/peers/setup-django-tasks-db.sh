#!/usr/bin/env bash
# A venv of its own for bench/peers/django_tasks_db_bench.py: django-tasks-db beside the Django,
# django-tasks backport and database drivers the project's .venv has (the same versions,
# so the two backends differ only in themselves). Never the project's .venv; everystep
# itself is imported from the tree measured (--source), as every bench does.
#
#   bash bench/peers/setup-django-tasks-db.sh          # /tmp/django-tasks-db-venv
#   DTDB_VENV=/somewhere bash bench/peers/setup-django-tasks-db.sh
#   "${DTDB_VENV:-/tmp/django-tasks-db-venv}"/bin/python bench/peers/django_tasks_db_bench.py --db postgres
set -euo pipefail

VENV="${DTDB_VENV:-/tmp/django-tasks-db-venv}"
PYTHON="${PYTHON:-python3}"

# The versions measured (bench/peers/README.md); change them here, and say so in the results.
# Django, django-tasks, psycopg and mysqlclient: those of the project's .venv.
DJANGO_TASKS_DB_VERSION="0.13.0"
DJANGO_VERSION="5.2.19"
DJANGO_TASKS_VERSION="0.12.0"
PSYCOPG_VERSION="3.3.9"
MYSQLCLIENT_VERSION="2.3.2"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet \
    "django-tasks-db==$DJANGO_TASKS_DB_VERSION" \
    "Django==$DJANGO_VERSION" \
    "django-tasks==$DJANGO_TASKS_VERSION" \
    "psycopg[binary]==$PSYCOPG_VERSION" \
    "mysqlclient==$MYSQLCLIENT_VERSION" \
    pydantic  # the test app the bench settings load has typed-value workflows (issue 55)

echo "venv: $VENV"
"$VENV/bin/python" - <<'PY'
import sys
from importlib.metadata import version

print(f"python {sys.version.split()[0]}")
for name in ("django-tasks-db", "django", "django-tasks", "psycopg", "mysqlclient"):
    print(f"{name} {version(name)}")
PY
