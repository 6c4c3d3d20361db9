"""As a user's project has it: SQLite in a file next to the project (its tests then run on
Django's in-memory test database) or PostgreSQL, ``DEBUG = True``, everystep installed
with Django's defaults. ``PUBLISHING_DB`` picks the database; ``PUBLISHING_TEST_DB``
names the test database on PostgreSQL, so a run can check it was removed."""

import os
from pathlib import Path

BASE_DIR = Path(os.environ.get("PUBLISHING_DIR", Path(__file__).resolve().parent.parent))
SECRET_KEY = "publishing-tests-only"
DEBUG = True
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "everystep",
    "shop",
]
if os.environ.get("PUBLISHING_DB", "sqlite") == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "HOST": os.environ.get("EVERYSTEP_TEST_PG_HOST", "127.0.0.1"),
            "PORT": os.environ.get("EVERYSTEP_TEST_PG_PORT", "5432"),
            "USER": os.environ.get("EVERYSTEP_TEST_PG_USER", "postgres"),
            "PASSWORD": os.environ.get("EVERYSTEP_TEST_PG_PASSWORD", ""),
            "NAME": "postgres",
            "TEST": {"NAME": os.environ["PUBLISHING_TEST_DB"]},
        }
    }
else:
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}
    }
