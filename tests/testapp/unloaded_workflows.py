"""A module nobody imports at start-up that registers a @workflow when imported: a task
run's name must not make a worker import it (and so make its workflow runnable)."""

from __future__ import annotations

from everystep import workflow
from tests.testapp.import_marks import mark

mark(__name__)


@workflow(name="unloaded.sneaky")
def sneaky() -> str:
    mark("unloaded.sneaky ran")
    return "ran"
