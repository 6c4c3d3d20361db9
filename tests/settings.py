"""Django settings for everystep's own test suite.

``EVERYSTEP_TEST_DEBUG=1``, ``EVERYSTEP_TEST_USE_TZ=0`` and ``EVERYSTEP_TEST_TIME_ZONE``
set ``DEBUG``, ``USE_TZ`` and ``TIME_ZONE`` (pytest keeps this ``DEBUG``:
``django_debug_mode = keep``).

The database comes from ``EVERYSTEP_TEST_DB``: ``sqlite`` (default), ``postgres`` or
``mariadb``. Each pytest session creates its own database with a random name and drops
it at the end; server coordinates can be overridden with ``EVERYSTEP_TEST_PG_*`` /
``EVERYSTEP_TEST_MYSQL_*``. SQLite runs with the OPTIONS the docs recommend
(``transaction_mode`` IMMEDIATE) unless ``EVERYSTEP_TEST_SQLITE_DEFAULT_TXN=1``.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from typing import Any

BACKEND = os.environ.get("EVERYSTEP_TEST_DB", "sqlite")
DATABASES: dict[str, dict[str, Any]]
# Worker subprocesses started by the tests inherit the suffix and so reach the same
# test database as the pytest process that created it.
SUFFIX = os.environ.setdefault("EVERYSTEP_TEST_DB_SUFFIX", uuid.uuid4().hex[:10])
TEST_DB_NAME = f"everystep_test_{SUFFIX}"
# Under pytest-xdist (`make test` runs the long tiers with -n) each pytest worker has a
# database of its own; its worker subprocesses inherit PYTEST_XDIST_WORKER and so find it.
# tests/conftest.py keeps pytest-django from adding the same suffix a second time.
if os.environ.get("PYTEST_XDIST_WORKER"):
    TEST_DB_NAME += f"_{os.environ['PYTEST_XDIST_WORKER']}"

if BACKEND == "sqlite":
    _dir = os.environ.setdefault(
        "EVERYSTEP_TEST_SQLITE_DIR", tempfile.mkdtemp(prefix="everystep-test-")
    )
    _path = os.path.join(_dir, f"{TEST_DB_NAME}.sqlite3")
    # The OPTIONS docs/running/databases.md gives users (and the runner adds to every
    # sqlite URL): wait for the write lock instead of failing, take it at BEGIN, WAL.
    # EVERYSTEP_TEST_SQLITE_DEFAULT_TXN=1 keeps Django's default (deferred) BEGIN, which
    # one tier of `make test` runs with (see the Makefile).
    _options: dict[str, Any] = {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"}
    if os.environ.get("EVERYSTEP_TEST_SQLITE_DEFAULT_TXN") != "1":
        _options["transaction_mode"] = "IMMEDIATE"
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _path,
            "TEST": {"NAME": _path},
            "OPTIONS": _options,
        }
    }
elif BACKEND == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "HOST": os.environ.get("EVERYSTEP_TEST_PG_HOST", "127.0.0.1"),
            "PORT": os.environ.get("EVERYSTEP_TEST_PG_PORT", "5432"),
            "USER": os.environ.get("EVERYSTEP_TEST_PG_USER", "postgres"),
            "PASSWORD": os.environ.get("EVERYSTEP_TEST_PG_PASSWORD", ""),
            "NAME": "postgres",
            "TEST": {"NAME": TEST_DB_NAME},
        }
    }
elif BACKEND == "mariadb":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "HOST": os.environ.get("EVERYSTEP_TEST_MYSQL_HOST", "127.0.0.1"),
            "PORT": os.environ.get("EVERYSTEP_TEST_MYSQL_PORT", "3306"),
            "USER": os.environ.get("EVERYSTEP_TEST_MYSQL_USER", "root"),
            "PASSWORD": os.environ.get("EVERYSTEP_TEST_MYSQL_PASSWORD", ""),
            "NAME": "test",
            "OPTIONS": {"charset": "utf8mb4"},
            "TEST": {"NAME": TEST_DB_NAME, "CHARSET": "utf8mb4", "COLLATION": "utf8mb4_bin"},
        }
    }
else:
    raise RuntimeError(f"EVERYSTEP_TEST_DB must be sqlite, postgres or mariadb, not {BACKEND!r}")

# Worker subprocesses started by the acceptance tests connect straight to the database
# the pytest process created.
if os.environ.get("EVERYSTEP_TEST_SUBPROCESS") and BACKEND != "sqlite":
    DATABASES["default"]["NAME"] = TEST_DB_NAME

# Keep worker connections between runs, as a production worker should.
DATABASES["default"].update(CONN_MAX_AGE=300, CONN_HEALTH_CHECKS=True)

# EVERYSTEP_TEST_PGBOUNCER=1 (PostgreSQL): every connection goes through PgBouncer in
# transaction mode (.ci/pgbouncer, 127.0.0.1:6432), as production often does, and the
# workers' LISTEN over the alias "direct", which reaches PostgreSQL itself (unless
# EVERYSTEP_TEST_LISTEN_DIRECT=0: then LISTEN goes through the pooler too, and fails).
if BACKEND == "postgres" and os.environ.get("EVERYSTEP_TEST_PGBOUNCER") == "1":
    # A mirror: the test database is created once, through the pooler.
    DATABASES["direct"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}
    DATABASES["default"].update(
        PORT=os.environ.get("EVERYSTEP_TEST_PGBOUNCER_PORT", "6432"),
        # Named cursors live in a session, which a transaction-mode pooler does not keep.
        DISABLE_SERVER_SIDE_CURSORS=True,
    )
    if os.environ.get("EVERYSTEP_TEST_LISTEN_DIRECT", "1") == "1":
        EVERYSTEP_LISTEN_DATABASE = "direct"
# A second database, which an atomic step must not touch (tests that use it ask for it).
DATABASES["aside"] = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}

# EVERYSTEP_TEST_ALIAS=jobs: a project with several databases (issue 22). everystep's
# tables live in "jobs" (the test database above, EVERYSTEP_DATABASE), the project's in
# "default" (a database of its own), and tests.routers.ReadReplicaRouter sends everystep's
# reads to "replica" (a mirror of "default") and its writes to "default": neither has an
# everystep table, so a statement that follows the router fails loudly.
_ALIAS = os.environ.get("EVERYSTEP_TEST_ALIAS")
if _ALIAS:
    DATABASES[_ALIAS] = DATABASES["default"]
    _app: dict[str, Any] = {**DATABASES[_ALIAS], "TEST": {**DATABASES[_ALIAS].get("TEST", {})}}
    _app_name = f"{TEST_DB_NAME}_app"
    if BACKEND == "sqlite":
        _app_name = os.path.join(os.path.dirname(_app["NAME"]), f"{_app_name}.sqlite3")
        _app["NAME"] = _app_name
    elif os.environ.get("EVERYSTEP_TEST_SUBPROCESS"):
        _app["NAME"] = _app_name
    _app["TEST"]["NAME"] = _app_name
    DATABASES["default"] = _app
    DATABASES["replica"] = {**_app, "TEST": {"MIRROR": "default"}}
    DATABASE_ROUTERS = ["tests.routers.ReadReplicaRouter"]
    EVERYSTEP_DATABASE = _ALIAS

SECRET_KEY = "everystep-tests-only"
# The modes users' projects run in, each set by a tier of `make test` (and inherited by
# worker subprocesses): DEBUG = True (Django logs every query), USE_TZ = False (naive
# local times in the database), a TIME_ZONE other than UTC.
DEBUG = os.environ.get("EVERYSTEP_TEST_DEBUG") == "1"
USE_TZ = os.environ.get("EVERYSTEP_TEST_USE_TZ", "1") == "1"
TIME_ZONE = os.environ.get("EVERYSTEP_TEST_TIME_ZONE", "UTC")
# Django's task framework (Django 6, or the django-tasks backport on 5.2) on everystep
# (issue 35): tests/testapp/tasks.py defines the tasks; "emails" is a second queue.
TASKS: dict[str, dict[str, Any]] = {
    "default": {
        "BACKEND": "everystep.tasks.EverystepBackend",
        "QUEUES": ["default", "emails"],
    }
}
if os.environ.get("EVERYSTEP_TEST_TASKS_OPTIONS") == "1":  # the system check's own test
    TASKS["default"]["OPTIONS"] = {"poll_interval": 1}
if os.environ.get("EVERYSTEP_TEST_TASKS_MISSPELT") == "1":  # QUEUES misspelt, and its test
    TASKS["default"]["QUEUE"] = TASKS["default"].pop("QUEUES")
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "everystep",
    "tests.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(process)d %(levelname)s %(name)s %(message)s"},
        "json": {"()": "everystep.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            # EVERYSTEP_TEST_LOG_JSON=1: the JSON lines a log shipper reads.
            "formatter": "json" if os.environ.get("EVERYSTEP_TEST_LOG_JSON") == "1" else "plain",
        }
    },
    "loggers": {
        "everystep": {
            "handlers": ["console"],
            "level": os.environ.get("EVERYSTEP_TEST_LOG_LEVEL", "WARNING"),
        }
    },
}
