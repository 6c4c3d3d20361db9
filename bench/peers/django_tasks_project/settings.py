"""The project of bench/peers/django_tasks.py: one PostgreSQL database (named by the
BENCH_DB environment variable), Django's task framework with two backends — everystep's
("default") and django-tasks-db's ("db") — and the tasks of bench_tasks/tasks.py."""

import os

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("BENCH_PG_PORT", "5432"),
        "USER": os.environ.get("BENCH_PG_USER", "postgres"),
        "PASSWORD": os.environ.get("BENCH_PG_PASSWORD", ""),
        "NAME": os.environ["BENCH_DB"],
    }
}
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "everystep",
    "django_tasks_db",
    "bench_tasks",
]
TASKS = {
    "default": {"BACKEND": "everystep.tasks.EverystepBackend"},
    "db": {"BACKEND": "django_tasks_db.DatabaseBackend"},
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
