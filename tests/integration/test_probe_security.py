"""What the probes and metrics give away (issue 21, item 6): the worker's port binds the
loopback unless told otherwise, ``/readyz`` never answers with a database error's text,
and the Django ``metrics_view`` answers only whom ``EVERYSTEP_METRICS_VIEW`` allows."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.http import Http404
from django.test import RequestFactory

from everystep import conf, options
from everystep.checks import check_settings
from everystep.metrics import metrics_view
from everystep.worker import Worker, health
from everystep.worker.http import ProbeServer
from tests.staff import staff_user

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_library_binds_the_probe_port_to_the_loopback_by_default():
    assert options.BY_NAME["metrics_bind"].default == "127.0.0.1"
    assert conf.worker_default("metrics_bind") == "127.0.0.1"
    assert Worker(pool_size=1, name="bind-default").options.metrics_bind == "127.0.0.1"


class _Draining:
    """A worker before its first heartbeat: readiness pings the database itself."""

    draining = False
    beat_written = None

    def database_silent(self) -> None:
        return None


@pytest.fixture
def database_gone(monkeypatch: Any):
    """The default connection pointed at a database that cannot be reached, then back."""
    connection.close()
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        monkeypatch.setitem(settings, "NAME", "/nonexistent/folder/secret-db.sqlite3")
    else:
        monkeypatch.setitem(settings, "HOST", "127.0.0.1")
        monkeypatch.setitem(settings, "PORT", "1")  # nothing listens there
    yield
    connection.close()


def test_readiness_never_answers_with_the_database_errors_text(database_gone, caplog):
    probe = health.Readiness()(_Draining())  # type: ignore[arg-type]
    answer = json.dumps(probe.as_dict())
    assert not probe.ok and probe.checks["database"] == "unreachable"
    for secret in ("secret-db", "nonexistent", "127.0.0.1", "port 1", "connection"):
        assert secret not in answer
    # The reason goes to the log, once per outage.
    health.Readiness()(_Draining())  # type: ignore[arg-type]
    assert any(
        r.message.startswith("readiness: the database is unreachable") for r in caplog.records
    )


def _metrics(user: Any) -> Any:
    request = RequestFactory().get("/metrics")
    request.user = user
    return metrics_view(request)


def test_metrics_view_needs_the_view_permission_by_default():
    """By default the metrics answer whom the UI's pages answer: an active staff user
    with the view permission; not a user holding it without staff (issue 41)."""
    assert _metrics(AnonymousUser()).status_code == 403
    assert _metrics(staff_user(name="blind", view=False)).status_code == 403
    outsider = staff_user(name="outsider")
    outsider.is_staff = False
    outsider.save()
    assert _metrics(User.objects.get(pk=outsider.pk)).status_code == 403
    allowed = _metrics(staff_user(name="viewer"))
    assert allowed.status_code == 200 and b"everystep_" in allowed.content


def test_metrics_view_public_and_off(settings):
    settings.EVERYSTEP_METRICS_VIEW = "public"
    assert _metrics(AnonymousUser()).status_code == 200
    settings.EVERYSTEP_METRICS_VIEW = "off"
    with pytest.raises(Http404):
        _metrics(staff_user(name="viewer"))


def test_a_wrong_metrics_view_setting_is_a_system_check_error(settings):
    settings.EVERYSTEP_METRICS_VIEW = "everyone"
    found = [m for m in check_settings() if m.id == "everystep.E005"]
    assert found and "'everyone'" in found[0].msg
    assert _metrics(AnonymousUser()).status_code == 403  # the safe rule meanwhile


def test_a_prober_that_hangs_up_before_the_answer_is_no_traceback(monkeypatch, capfd, caplog):
    """A probe client that gives up first (a Kubernetes probe's timeout) leaves a debug line,
    not a traceback on stderr for every probe (issue 37)."""
    answering = threading.Event()

    def slow_liveness(worker: Any) -> health.Probe:
        answering.set()
        threading.Event().wait(0.5)  # the client is gone by the time the answer is written
        return health.Probe(True)

    monkeypatch.setattr(health, "liveness", slow_liveness)
    # metrics_port 0 here: the server binds a free port.
    server = ProbeServer(Worker(pool_size=1, name="hung-up").state)
    server.start()
    caplog.set_level(logging.DEBUG, logger="everystep.worker")
    try:
        for _ in range(3):
            answering.clear()
            client = socket.create_connection(("127.0.0.1", server.port))
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert answering.wait(10)
            # Closed with a reset, as a prober that timed out does.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            threading.Event().wait(0.8)
    finally:
        server.stop()
    assert "Traceback" not in capfd.readouterr().err
    assert sum("hung up" in r.getMessage() for r in caplog.records) == 3
