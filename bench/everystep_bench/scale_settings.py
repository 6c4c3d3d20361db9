"""``everystep_bench.settings`` pointed at the UI scale database (``bench/ui_scale.py``).

The database is ``everystep_scale`` (``EVERYSTEP_SCALE_DB`` overrides it) on the server
``EVERYSTEP_TEST_DB`` names: a database of its own, kept between runs, never one the
test suite creates or drops.
"""

from __future__ import annotations

import os

from everystep_bench.settings import *  # noqa: F403
from everystep_bench.settings import DATABASES

DATABASES["default"]["NAME"] = os.environ.get("EVERYSTEP_SCALE_DB", "everystep_scale")
DATABASES["default"].pop("TEST", None)
DATABASES["default"]["CONN_MAX_AGE"] = None
# The timing pass drives the views through Django's test client.
ALLOWED_HOSTS = ["testserver"]
