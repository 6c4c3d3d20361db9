"""Issue 21 in the built image: the UI outlasts slow clients, the demo listens on loopback
and refuses a real database, the worker's probes listen where a pod's probes reach them, and
the installed distributions are exactly image/constraints.txt."""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from packaging.utils import canonicalize_name

from tests.image.conftest import ROOT, Database, host_runner, podman, run, wait_for
from tests.image.test_image import exit_code, free_port, project_env, start

# Half-sent requests held open at once: more than the two sync workers that used to hang,
# fewer than one gthread worker's threads (everystep_runner.ui.THREADS), so the test holds
# however gunicorn spreads them over its workers.
SLOW_CLIENTS = 6
PARTIAL_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def healthz(port: int, timeout: float = 5) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=timeout) as resp:
            return resp.status == 200
    except OSError:
        return False


@contextmanager
def slow_clients(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that each sent part of a request's headers, then stalled."""
    clients = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]
    try:
        for client in clients:
            client.sendall(PARTIAL_REQUEST)
        yield clients
    finally:
        for client in clients:
            client.close()


def test_ui_answers_healthz_while_slow_clients_hold_connections(image, database, containers):
    """With six clients stalled mid-request (the UI's worker timeout is 120 s), /healthz
    and the image's HEALTHCHECK still answer, and the stalled requests are still served
    once they finish: held, not dropped."""
    host_runner(database, "migrate", "--noinput", "-v", "0")
    port = free_port()
    env = project_env(database, EVERYSTEP_UI_BIND=f"127.0.0.1:{port}", EVERYSTEP_UI_TIMEOUT="120")
    name = start(containers, image, "es-ui-slow", "ui", env=env)
    wait_for(lambda: healthz(port), 120, "the UI's /healthz", name)
    with slow_clients(port, SLOW_CLIENTS) as clients:
        assert healthz(port, timeout=20), podman("logs", name).stdout[-3000:]
        assert podman("healthcheck", "run", name, check=False).returncode == 0
        clients[0].sendall(b"\r\n")  # the first stalled request, finished
        assert clients[0].recv(64).startswith(b"HTTP/1.1 200")


def test_ui_probes_answer_while_50_clients_hold_half_sent_requests(image, database, containers):
    """With 50 clients holding half-sent requests to the UI (more than its 2 x 8 threads),
    the ui role's probes on the probe port answer within 1 s, and so does the image's
    HEALTHCHECK, which asks them first."""
    host_runner(database, "migrate", "--noinput", "-v", "0")
    port = free_port()
    env = project_env(database, EVERYSTEP_UI_BIND=f"127.0.0.1:{port}")
    probes = int(env["EVERYSTEP_METRICS_PORT"])
    name = start(containers, image, "es-ui-probes", "ui", env=env)
    wait_for(lambda: healthz(port), 120, "the UI's /healthz", name)
    with slow_clients(port, 50):
        assert healthz(probes, timeout=1), podman("logs", name).stdout[-3000:]
        check = podman("healthcheck", "run", name, check=False, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr


def test_configuration_is_read_only_to_the_runner(image):
    """/etc/everystep (where runner.toml is read) and /app are root's and not writable by
    the runner, as UID 10001 or an arbitrary UID in group 0, even on a writable root."""
    script = (
        "stat -c '%U %a' /etc/everystep /app; "
        "for d in /etc/everystep /app; do touch $d/probe 2>/dev/null && echo WROTE $d; done; "
        "touch $HOME/probe && echo HOME-WRITABLE"
    )
    for user in ((), ("--user", "12345:0")):
        done = podman("run", "--rm", *user, "--entrypoint", "sh", image, "-c", script)
        assert done.stdout.splitlines() == ["root 755", "root 755", "HOME-WRITABLE"], user


def listening(name: str) -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket in the container's network namespace."""
    table = podman("exec", name, "cat", "/proc/net/tcp").stdout.splitlines()[1:]
    found = set()
    for row in table:
        local, state = row.split()[1], row.split()[3]
        if state == "0A":  # LISTEN
            address, port = local.split(":")
            found.add((socket.inet_ntoa(bytes.fromhex(address)[::-1]), int(port, 16)))
    return found


def test_demo_listens_on_loopback_and_worker_probes_on_all_interfaces(image, containers):
    """In its own network namespace, the demo's UI listens on 127.0.0.1 only (nothing told
    it otherwise), while its worker's probes and metrics listen on 0.0.0.0:9117 because
    the image sets EVERYSTEP_METRICS_BIND explicitly."""
    env = json.loads(podman("image", "inspect", image).stdout)[0]["Config"]["Env"]
    assert "EVERYSTEP_METRICS_BIND=0.0.0.0" in env
    podman("rm", "-f", "-t", "0", "es-demo-bind", check=False)
    run("-d", "--name", "es-demo-bind", image, "demo")
    containers.append("es-demo-bind")
    # Its own network namespace: the sockets read below are the container's alone.
    host_config = json.loads(podman("inspect", "es-demo-bind").stdout)[0]["HostConfig"]
    assert host_config["NetworkMode"] == "bridge"
    wanted = {("127.0.0.1", 8000), ("0.0.0.0", 9117)}
    sockets = wait_for(
        lambda: (found := listening("es-demo-bind")) >= wanted and found,
        120,
        "the demo's UI and its worker's probes",
        "es-demo-bind",
    )
    assert not {address for address, port in sockets if port == 8000} - {"127.0.0.1"}
    podman("stop", "-t", "60", "es-demo-bind", timeout=120)
    assert exit_code("es-demo-bind") == 0


def test_demo_refuses_a_database_url_in_the_image(image, database: Database, containers):
    """`demo` with EVERYSTEP_DATABASE_URL (as a compose file might leave it) exits 2 at
    once and writes nothing to that database."""
    host_runner(database, "migrate", "--noinput", "-v", "0")
    # Named, on free ports: a demo that does not refuse is found and removed at teardown.
    containers.append("es-demo-refuses")
    env = ("-e", f"EVERYSTEP_DATABASE_URL={database.url}")
    env += ("-e", f"EVERYSTEP_METRICS_PORT={free_port()}")
    args = ("--name", "es-demo-refuses", "--network", "host", *env, image)
    bind = ("--ui-bind", f"127.0.0.1:{free_port()}")
    result = run("--rm", *args, *bind, "demo", check=False, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "refusing to start: database_url is set (from env EVERYSTEP_DATABASE_URL)" in (
        result.stderr
    )
    assert database.query("SELECT count(*) FROM everystep_workflow") == [(0,)]


def test_image_installs_exactly_the_constraints(image):
    """Every distribution in the image's venv is at the version image/constraints.txt pins,
    and nothing is installed that the file does not pin (the project's own two aside)."""
    frozen = run("--rm", "--entrypoint", "/opt/everystep/bin/pip", image, "freeze", "--all")
    installed = {
        canonicalize_name(name): version
        for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", frozen.stdout, re.M)
    }
    local = re.findall(r"^([A-Za-z0-9_.-]+) @ ", frozen.stdout, re.M)
    assert sorted(local) == ["everystep", "everystep-runner"]
    text = (ROOT / "image" / "constraints.txt").read_text()
    pinned = {
        canonicalize_name(name): version
        for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", text, re.M)
    }
    assert installed == pinned
