"""The runner's ``ui`` role, started as the runner starts it (gunicorn, the example project):
its probes answer on the probe port whatever clients do to the UI (issue 39), its log lines
keep the runner's format when the project's LOGGING names ``everystep``, and gunicorn's
control socket stays closed (issue 41)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from everystep_runner import probe_listener

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "image" / "example_project"
STARTUP_TIMEOUT = 90.0
SLOW_CLIENTS = 50
# A request line cut short: gunicorn's thread that took it waits for the rest.
PARTIAL_REQUEST = b"GET /runs/?status=fail"
# The example project, with a LOGGING that names the everystep logger in a format of its
# own (as docs/observability.md's examples do), and metrics any client may read.
LOGGING_SETTINGS = """\
from mysite.settings import *  # noqa: F403

LOGGING = {
    "version": 1,
    "formatters": {"plain": {"format": "PROJECT-FORMAT %(name)s %(message)s"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "stream": "ext://sys.stdout",
        }
    },
    "loggers": {"everystep": {"handlers": ["console"], "level": "INFO"}},
}
EVERYSTEP_METRICS_VIEW = "public"
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class UI:
    """A running ``everystep-runner ui``: its ports, its environment and its output."""

    port: int
    probe_port: int
    env: dict[str, str]
    home: Path
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def logging_project_env(tmp: Path, **more: str) -> dict[str, str]:
    """The environment of a runner subprocess on the example project with the LOGGING
    above (written to ``tmp``, importable from there), json logs, a SQLite file in
    ``tmp``: this checkout's code, none of the developer's EVERYSTEP_* settings."""
    (tmp / "logsite_settings.py").write_text(LOGGING_SETTINGS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVERYSTEP_")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("XDG_RUNTIME_DIR", None)
    return env | {
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "image"), str(tmp)]),
        "HOME": str(tmp),
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "EXAMPLE_HTTPS": "0",
        "EVERYSTEP_PROJECT_DIR": str(EXAMPLE),
        "EVERYSTEP_SETTINGS_MODULE": "logsite_settings",
        "EVERYSTEP_DATABASE_URL": f"sqlite:///{tmp / 'runner.sqlite3'}",
        "EVERYSTEP_LOG_FORMAT": "json",
        **more,
    }


def answering(url: str) -> bool:
    try:
        return get(url)[0] == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UI]:
    """The ui role with two gunicorn workers, its probes on 127.0.0.1, the project's
    LOGGING above, json logs; on a SQLite file never migrated (no page needs a table)."""
    tmp = tmp_path_factory.mktemp("ui-role")
    port, probe_port = free_port(), free_port()
    env = logging_project_env(
        tmp, EVERYSTEP_UI_BIND=f"127.0.0.1:{port}", EVERYSTEP_METRICS_PORT=str(probe_port)
    )
    log = tmp / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "everystep_runner", "ui"],
            env=env,
            cwd=tmp,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = UI(port, probe_port, env, tmp, log)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        # The UI's own /healthz: the probes listen before gunicorn's first worker starts.
        while not answering(f"http://127.0.0.1:{port}/healthz"):
            assert proc.poll() is None, f"the ui role exited:\n{server.output()[-4000:]}"
            assert time.monotonic() < deadline, f"no answer:\n{server.output()[-4000:]}"
            time.sleep(0.25)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextlib.contextmanager
def half_sent(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that each sent part of a request line, then stalled."""
    clients: list[socket.socket] = []
    try:
        for _ in range(count):
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            clients[-1].sendall(PARTIAL_REQUEST)
        yield clients
    finally:
        for client in clients:
            client.close()


def test_probes_answer_within_a_second_while_50_clients_hold_half_sent_requests(ui: UI) -> None:
    """With 50 clients holding half-sent requests to the UI (more than its 2 x 8 threads),
    /healthz, /livez and /readyz on the probe port answer 200 within 1 s each."""
    with half_sent(ui.port, SLOW_CLIENTS):
        time.sleep(1)  # gunicorn has handed them to its threads
        for path in probe_listener.PROBE_PATHS:
            started = time.monotonic()
            status, body = get(f"http://127.0.0.1:{ui.probe_port}{path}", timeout=1)
            assert (status, body) == (200, b"ok\n")
            assert time.monotonic() - started < 1


def test_healthcheck_role_passes_under_the_same_load(ui: UI) -> None:
    """`everystep-runner healthcheck` (the image's HEALTHCHECK) asks the probe port first
    and passes at once under that load."""
    with half_sent(ui.port, SLOW_CLIENTS):
        time.sleep(1)
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "everystep_runner", "healthcheck"],
            env=ui.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"healthy: http://127.0.0.1:{ui.probe_port}/healthz" in result.stdout
    assert elapsed < 5  # a UI port tried instead would have taken its 5 s timeout


def test_probe_port_outlasts_a_flood_of_its_own(ui: UI) -> None:
    """200 idle connections to the probe port itself (more than it keeps) do not shut a
    probe out: the oldest are dropped, and the probe is answered within 1 s."""
    with half_sent(ui.probe_port, 200) as idle:
        status, _ = get(f"http://127.0.0.1:{ui.probe_port}/healthz", timeout=1)
        assert status == 200
        dropped = sum(1 for client in idle[:50] if _closed_by_peer(client))
    assert dropped == 50


def _closed_by_peer(client: socket.socket) -> bool:
    client.settimeout(5)
    try:
        return client.recv(1) == b""
    except OSError:
        return True


def test_probe_port_answers_nothing_but_the_probes(ui: UI) -> None:
    """Any other path is 404 and a POST 405: the port shows the UI's health, nothing else."""
    assert get(f"http://127.0.0.1:{ui.probe_port}/metrics")[0] == 404
    assert get(f"http://127.0.0.1:{ui.probe_port}/runs/")[0] == 404
    post = urllib.request.Request(f"http://127.0.0.1:{ui.probe_port}/healthz", data=b"x")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=5)
    assert refused.value.code == 405


def test_ui_logs_keep_the_runners_format_over_the_projects_logging(ui: UI) -> None:
    """A UI request served by a gunicorn worker logs an everystep record (the metrics'
    queue gauges cannot read the unmigrated database) and its access line: both are JSON,
    as log_format says, though the project's LOGGING names the everystep logger."""
    status, _ = get(f"http://127.0.0.1:{ui.port}/metrics?probe-logs")
    assert status == 200
    deadline = time.monotonic() + 10
    while "probe-logs" not in ui.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = ui.output().splitlines()
    assert not [line for line in lines if "PROJECT-FORMAT" in line]
    records = [json.loads(line) for line in lines if line.startswith("{")]
    loggers = {record["logger"] for record in records}
    assert {"everystep.metrics", "gunicorn.access", "gunicorn.error"} <= loggers
    unavailable = [r for r in records if r.get("event") == "metrics.queue_unavailable"]
    assert unavailable and unavailable[0]["level"] == "WARNING"
    access = [r for r in records if r["logger"] == "gunicorn.access"]
    assert any("GET /metrics?probe-logs" in r["message"] for r in access)


def test_no_gunicorn_control_socket(ui: UI) -> None:
    """Gunicorn's control socket (which can resize or stop the UI) is not opened."""
    assert not (ui.home / ".gunicorn").exists()
    assert "control socket" not in ui.output().lower()


# --- the listener on its own ---------------------------------------------------------


def test_listener_says_503_without_a_live_worker_and_survives_a_fork() -> None:
    """No worker with a fresh heartbeat: 503. A fork (as gunicorn spawns a worker) pauses
    the listener's thread and starts it again in the parent; the child closes its copies."""
    healthy = [False]
    listener = probe_listener.ProbeListener(
        probe_listener.listen("127.0.0.1", 0), lambda: healthy[0]
    )
    listener.start()
    try:
        url = f"http://127.0.0.1:{listener.port}/healthz"
        assert get(url)[0] == 503
        pid = os.fork()
        if pid == 0:  # the child: its copy of the listening socket is closed already
            os._exit(0 if listener.sock.fileno() == -1 else 1)
        assert os.waitpid(pid, 0)[1] == 0
        healthy[0] = True
        assert get(url, timeout=1) == (200, b"ok\n")
    finally:
        listener.stop()
