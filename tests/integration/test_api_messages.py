"""What the API says when it is misused, as a new user meets it (issue 54): a sync call
from async code names the call to await; a timed-out wait says which run and whether a
worker ever claimed it; ``enqueue()`` checks arguments as ``schedule()`` does; code
typed into ``manage.py shell`` is told to move to a module; ``dir(everystep)`` lists the
API."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import SynchronousOnlyOperation

import everystep
from everystep.errors import WaitTimeout
from tests.testapp import composition as cw
from tests.testapp import tasks

pytestmark = [pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("call", "twin"),
    [
        (lambda: everystep.schedule(cw.child_sum, 1, 2), "await aschedule()"),
        (lambda: everystep.start(cw.child_sum, 1, 2), "await aschedule()"),
        (lambda: tasks.add.enqueue(1, 2), "await task.aenqueue()"),
        (lambda: everystep.send("00000000-0000-0000-0000-000000000000", "go"), "await asend()"),
        (lambda: everystep.result("00000000-0000-0000-0000-000000000000"), "await aresult()"),
        (lambda: everystep.gather(["00000000-0000-0000-0000-000000000000"]), "await agather()"),
        (lambda: everystep.cancel("00000000-0000-0000-0000-000000000000"), "await acancel()"),
    ],
)
def test_a_sync_call_from_async_code_names_the_call_to_await(call, twin):
    async def view() -> None:
        call()

    with pytest.raises(SynchronousOnlyOperation, match=rf"called from async code.*use {twin}"):
        asyncio.run(view())


def test_a_timed_out_wait_names_its_run_and_says_no_worker_claimed_it():
    run = everystep.schedule(cw.child_sum, 1, 2)
    with pytest.raises(WaitTimeout) as raised:
        everystep.result(run, timeout=0.05)
    message = str(raised.value)
    assert f"result(): run {run.id} had not ended within" in message
    assert "no worker has claimed it yet" in message and "everystep_worker" in message
    other = everystep.schedule(cw.child_sum, 3, 4)
    with pytest.raises(WaitTimeout, match=r"2 of the 2 runs .* claimed 2 of them yet"):
        everystep.gather([run, other], timeout=0.05)


def test_an_async_timed_out_wait_says_the_same():
    run = everystep.schedule(cw.child_sum, 1, 2)
    with pytest.raises(WaitTimeout, match=rf"aresult\(\): run {run.id} .* no worker has claimed"):
        asyncio.run(everystep.aresult(run, timeout=0.05))


def test_enqueue_checks_arguments_against_the_tasks_signature():
    with pytest.raises(TypeError, match=r"cannot enqueue task tests\.testapp\.tasks\.add\(a, b"):
        tasks.add.enqueue(1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'scales'"):
        tasks.add.enqueue(1, 2, scales=3)
    with pytest.raises(TypeError, match="cannot enqueue task"):
        tasks.introspect.enqueue()  # its context comes first, then tag
    assert tasks.introspect.enqueue("ok").args == ["ok"]


def test_a_workflow_typed_into_manage_py_shell_is_told_to_move_to_a_module():
    code = (
        "import everystep\n"
        "@everystep.workflow\n"
        "def hello(name): return name\n"
        "everystep.schedule(hello, 'ann')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(DJANGO_SETTINGS_MODULE="tests.settings", EVERYSTEP_TEST_SUBPROCESS="1")
    done = subprocess.run(
        [sys.executable, "-m", "django", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "it is defined in a manage.py shell session, which no worker can import" in done.stderr
    assert "add 'django.core.management.commands.shell' to" not in done.stderr


def test_dir_of_everystep_lists_its_api():
    listed = dir(everystep)
    assert {"schedule", "start", "workflow", "step", "cancel", "Terminal"} <= set(listed)
