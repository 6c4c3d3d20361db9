#!/usr/bin/env bash
# A venv of its own for bench/peers/django_tasks.py: this checkout of everystep (editable),
# Django 6 (whose django.tasks django-tasks-db 0.13 needs: with the 0.12 backport on Django
# 5.2 it refuses to import) and django-tasks-db, pinned. Never the project's .venv.
#
#   bash bench/peers/setup-django-tasks.sh        # /tmp/tasks-bench-venv
#   /tmp/tasks-bench-venv/bin/python bench/peers/django_tasks.py --tasks 2000
set -euo pipefail

VENV="${TASKS_VENV:-/tmp/tasks-bench-venv}"
# Django 6 needs Python >= 3.12.
PYTHON="${PYTHON:-$(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python 2>/dev/null | head -1)}"
PYTHON="${PYTHON:-python3.12}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"

# The versions measured (bench/peers/README.md); change them here, and say so there.
DJANGO_VERSION="6.1.3"
DJANGO_TASKS_DB_VERSION="0.13.0"
PSYCOPG_VERSION="3.3.9"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e "$ROOT" \
    "Django==$DJANGO_VERSION" \
    "django-tasks-db==$DJANGO_TASKS_DB_VERSION" \
    "psycopg[binary]==$PSYCOPG_VERSION"
"$VENV/bin/python" - <<'PY'
import sys
from importlib.metadata import version

print(f"python {sys.version.split()[0]}")
for name in ("Django", "django-tasks-db", "psycopg", "everystep"):
    print(f"{name} {version(name)}")
PY
