"""compose.yaml started for real with podman-compose: PostgreSQL, migrate, two runners, UI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.image.conftest import ROOT, SECRET_KEY, assert_hardened, podman, wait_for

PROJECT = "everystep-ci"
# No registry is reachable on CI machines: compose.yaml's postgres:16 is replaced by a
# stand-in built from Debian's PostgreSQL on this base (see image/ci/).
BASE_IMAGE = os.environ.get("EVERYSTEP_TEST_BASE_IMAGE", "localhost/everystep-base:bookworm")
POSTGRES_IMAGE = "docker.io/library/postgres:16"
# The workers' runner names: runner-1 runs two processes (EVERYSTEP_PROCESSES).
NAMES = {"runner-0", "runner-1", "runner-1/1"}


def compose(
    *args: str, timeout: float = 600, secret: str | None = SECRET_KEY, check: bool = True
) -> subprocess.CompletedProcess:
    """podman-compose on compose.yaml, given ``secret`` as DJANGO_SECRET_KEY (None: unset)."""
    tool = shutil.which("podman-compose") or str(Path(sys.executable).parent / "podman-compose")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SECRET_KEY"}
    if secret is not None:
        env["DJANGO_SECRET_KEY"] = secret
    result = subprocess.run(
        [tool, "-p", PROJECT, "-f", str(ROOT / "compose.yaml"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert result.returncode == 0 or not check, (
        f"podman-compose {args} failed:\n{result.stdout}\n{result.stderr}"
    )
    return result


def container(service: str) -> str:
    names = podman(
        "ps",
        "--filter",
        f"label=io.podman.compose.project={PROJECT}",
        "--filter",
        f"label=com.docker.compose.service={service}",
        "--format",
        "{{.Names}}",
    ).stdout.split()
    assert names, f"no running container for service {service}"
    return names[0]


def sql(query: str) -> str:
    return podman(
        "exec", container("db"), "psql", "-U", "everystep", "-d", "everystep", "-tAc", query
    ).stdout.strip()


@pytest.fixture(scope="module")
def stack(image: str) -> Iterator[None]:
    podman("tag", image, "localhost/everystep-runner:latest")
    if podman("image", "exists", POSTGRES_IMAGE, check=False).returncode != 0:
        podman(
            "build",
            "--build-arg",
            f"BASE_IMAGE={BASE_IMAGE}",
            "-f",
            str(ROOT / "image/ci/postgres.Dockerfile"),
            "-t",
            POSTGRES_IMAGE,
            str(ROOT / "image/ci"),
            timeout=900,
        )
    compose("down", "-v", "-t", "0")  # whatever an interrupted run left behind
    try:
        compose("up", "-d", "--no-build")
        yield
    finally:
        subprocess.run(
            ["podman", "logs", "--tail", "30", f"{PROJECT}_runner-0_1"],
            check=False,
            capture_output=True,
        )
        compose("down", "-v", "-t", "60")


def test_compose_stack_runs_workflows(stack):
    """`compose up` gives a working stack: migrations applied, runs scheduled through the
    stack complete on the two named runners, and the UI answers."""

    def ui_up() -> bool:
        try:
            with urllib.request.urlopen("http://127.0.0.1:8000/healthz", timeout=5) as resp:
                return resp.status == 200
        except OSError:
            return False

    wait_for(ui_up, 300, "the UI on port 8000")

    def migrated() -> bool:
        try:
            applied = sql("SELECT count(*) FROM django_migrations WHERE app = 'everystep'")
            return int(applied) >= 2
        except AssertionError:  # the database or its tables are not there yet
            return False

    wait_for(migrated, 300, "the one-shot migrate")
    code = (
        "from everystep import schedule; from shop.workflows import fulfil; "
        "[schedule(fulfil, i, 0.2) for i in range(20)]"
    )
    compose("run", "--rm", "migrate", "shell", "-c", code)
    wait_for(
        lambda: sql("SELECT count(*) FROM everystep_workflow WHERE status = 'completed'") == "20",
        180,
        "20 completed runs",
    )
    runners = set(sql("SELECT DISTINCT claimed_by FROM everystep_workflow").split())
    assert runners <= NAMES and runners

    # A runner that started while migrate was still running waits for it, and only then
    # writes its heartbeat: the other may have done all 20 runs by that time.
    def heartbeats() -> set[str]:
        return set(sql("SELECT name FROM everystep_runner").split())

    wait_for(lambda: len(heartbeats()) >= len(NAMES), 120, "every worker process's heartbeat")
    assert heartbeats() == NAMES
    with urllib.request.urlopen("http://127.0.0.1:8000/", timeout=10) as resp:
        # The UI needs a staff login outside the demo: the login page proves it is served.
        assert resp.status == 200
        assert "login" in resp.url


def test_compose_runners_run_hardened(stack):
    """The runner services (workers and UI) run hardened as compose.yaml asks."""
    for service in ("runner-0", "runner-1", "ui"):
        assert_hardened(container(service))


def test_compose_requires_a_secret_key():
    """compose.yaml refuses to start without DJANGO_SECRET_KEY (no fixed fallback key), and
    passes the one it is given to every runner service."""
    refused = compose("config", secret=None, check=False)
    assert refused.returncode != 0
    assert "DJANGO_SECRET_KEY" in refused.stderr
    services = yaml.safe_load(compose("config").stdout)["services"]
    for name in ("migrate", "runner-0", "runner-1", "ui"):
        assert services[name]["environment"]["DJANGO_SECRET_KEY"] == SECRET_KEY, name
