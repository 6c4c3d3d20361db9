"""Which code a claimed run's pass goes through: a plain ``@workflow`` run's pass never
enters the Django-tasks adapter (``everystep.task_runs``); a task run's does, through the
hooks its definition carries."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import everystep.task_runs
from everystep import schedule
from everystep.models import Workflow
from everystep.testing import run_due
from tests.testapp import tasks as task_functions
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)

ADAPTER = str(Path(everystep.task_runs.__file__).resolve())


@contextmanager
def adapter_calls() -> Iterator[list[str]]:
    """The functions of ``everystep.task_runs`` called while the block runs, on any thread
    ``run_due`` uses (it runs passes on this one)."""
    called: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename == ADAPTER:
            called.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        yield called
    finally:
        sys.setprofile(None)


def test_a_plain_workflow_runs_pass_calls_no_adapter_code():
    """Claim, replay and finish of a @workflow run: not one call into task_runs."""
    run = schedule(wf.sequential, 2, 3)
    with adapter_calls() as called:
        run_due()
    assert Workflow.objects.get(id=run.id).status == "completed"
    assert called == []


def test_a_task_runs_pass_goes_through_the_adapter_hooks():
    """The same path for a task run calls the adapter's begin and finished hooks: the
    profile above sees calls when there are any."""
    result = task_functions.add.enqueue(2, 3)
    with adapter_calls() as called:
        run_due()
    assert Workflow.objects.get(id=result.id).status == "completed"
    assert {"begin", "finished"} <= set(called)
