"""Open waits under an ASGI server hold no database connection of their own (security
issue 50, item 5). Django's ASGI handler runs each request's sync work — its own
``request_started`` receivers, the view's ORM calls — on a thread of that request, whose
connection stays open until the request ends; ``aresult`` and ``awatch`` close it before
they wait, so that a hundred open streams cost the hub's connections, not a hundred."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from everystep import schedule
from everystep.models import Workflow
from everystep.testing import run_due
from tests.integration.test_async_callers import database_sessions, free_port, hub_idle, until
from tests.testapp import composition as cw
from tests.workers import running, uvicorn_command, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

STREAMS = RESULTS = 12


def uvicorn(port: int, log: Path) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """uvicorn serving ``waiting_site`` against the test database, stopped on exit."""
    env = {**worker_env(), "DJANGO_SETTINGS_MODULE": "tests.integration.waiting_site"}
    return running(uvicorn_command(port), log, env)


@pytest.mark.backends("postgres")
def test_open_streams_and_results_under_uvicorn_hold_only_the_hubs_connections(tmp_path: Path):
    """24 requests under uvicorn (12 SSE streams of ``awatch``, 12 ``aresult``), each view
    reading the ORM before it waits, hold at most the hub's two connections while they
    wait (one per request before), and all answer once their runs have run."""
    hub_idle()
    runs = [schedule(cw.child_sum, n, 1) for n in range(STREAMS + RESULTS)]
    port = free_port()
    log = tmp_path / "uvicorn.log"
    before = database_sessions()
    with uvicorn(port, log) as server:

        def answering() -> bool:
            assert server.poll() is None, log.read_text()
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        until(answering, "uvicorn to listen")

        def get(index: int) -> str:
            kind = "stream" if index < STREAMS else "result"
            url = f"http://127.0.0.1:{port}/{kind}/{runs[index].id}/"
            with urllib.request.urlopen(url, timeout=150) as response:
                return response.read().decode()

        with ThreadPoolExecutor(len(runs)) as pool:
            answers = pool.map(get, range(len(runs)))
            # The hub marks each waiter's run awaited once it holds the waiter, which
            # closed its request's connection before it registered.
            awaited = Workflow.objects.filter(id__in=[run.id for run in runs], awaited=True)
            try:
                until(lambda: awaited.count() == len(runs), "every request waiting")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; uvicorn: {log.read_text()[-3000:]}") from None
            during = database_sessions()
            run_due()
            answers = list(answers)
    assert during - before <= 2, (before, during)
    for body in answers[:STREAMS]:
        events = body.strip().split("\n\n")
        assert events[-1] == 'event: end\ndata: {"status": "completed"}', body
        assert events[0] == "data: {}", body
    assert [json.loads(body)["result"] for body in answers[STREAMS:]] == [
        n + 1 for n in range(STREAMS, STREAMS + RESULTS)
    ]
