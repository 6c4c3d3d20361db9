"""``tests/settings.py`` plus the ``everystep_bench`` app, and ``CONN_MAX_AGE`` from
``EVERYSTEP_TEST_CONN_MAX_AGE`` (seconds, or ``none`` for unlimited; unset keeps the
test settings' value).

The benchmarks run the worker with ``DJANGO_SETTINGS_MODULE=everystep_bench.settings``
and ``bench/`` on ``PYTHONPATH``; the ``tests`` package comes from the source tree being
measured.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "everystep_bench.apps.EverystepBenchConfig"]

_conn_max_age = os.environ.get("EVERYSTEP_TEST_CONN_MAX_AGE", "").strip().lower()
if _conn_max_age:
    DATABASES["default"]["CONN_MAX_AGE"] = None if _conn_max_age == "none" else int(_conn_max_age)

_prepare = os.environ.get("EVERYSTEP_TEST_PREPARE_THRESHOLD", "").strip()
if _prepare and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = int(_prepare)
