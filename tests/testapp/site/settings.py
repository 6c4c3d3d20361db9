"""``tests.settings`` with the start-up modules and the recovery limit a test gives in
``EVERYSTEP_TEST_WORKFLOW_MODULES`` (comma-separated) and
``EVERYSTEP_TEST_MAX_RECOVERIES``."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

EVERYSTEP_WORKFLOW_MODULES = [
    module for module in os.environ.get("EVERYSTEP_TEST_WORKFLOW_MODULES", "").split(",") if module
]
EVERYSTEP_MAX_RECOVERIES = int(os.environ.get("EVERYSTEP_TEST_MAX_RECOVERIES", "10"))
