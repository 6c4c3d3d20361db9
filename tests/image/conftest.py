"""The built runner image, run for real with podman against the host's PostgreSQL."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "image" / "example_project"
IMAGE = os.environ.get("EVERYSTEP_TEST_IMAGE", "localhost/everystep-runner:test")
PG = os.environ.get("EVERYSTEP_TEST_PG_URL", "postgres://postgres@127.0.0.1:5432")
# The example project has no fallback key (issue 21): one per test session.
SECRET_KEY = secrets.token_urlsafe(50)
# Every container the tests start runs as docs/running/hardened.md says: a
# read-only root with only /tmp writable, no capabilities, no gaining privileges. podman
# would otherwise also make /run and /var/tmp writable, which Docker and Kubernetes don't.
HARDENED = (
    "--read-only",
    "--read-only-tmpfs=false",
    "--tmpfs",
    "/tmp",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
)


def podman(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args)} failed ({result.returncode}):\n"
            f"{result.stdout}\n{result.stderr}"
        )
    return result


def run(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """`podman run`, hardened."""
    return podman("run", *HARDENED, *args, check=check, timeout=timeout)


def assert_hardened(name: str) -> None:
    """The running container has a read-only root filesystem (HOME and the venv included)
    and a writable /tmp, and its PID 1 has no capabilities, not even in its bounding set,
    and no_new_privs."""
    host = json.loads(podman("inspect", name).stdout)[0]["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert "/tmp" in host["Tmpfs"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert not host["CapAdd"]
    for path in ("/probe", "/home/everystep/probe", "/opt/everystep/probe"):
        result = podman("exec", name, "touch", path, check=False)
        assert result.returncode != 0 and "Read-only file system" in result.stderr, path
    podman("exec", name, "touch", "/tmp/probe")
    status = podman("exec", name, "cat", "/proc/1/status").stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert int(fields["CapBnd"], 16) == 0
    assert int(fields["CapEff"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str, logs_of: str | None = None
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            logs = podman("logs", logs_of, check=False).stdout[-4000:] if logs_of else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs}")
        time.sleep(0.3)


@pytest.fixture(scope="session")
def image() -> str:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (CI installs it: see .ci/run)")
    if podman("image", "exists", IMAGE, check=False).returncode != 0:
        pytest.fail(f"image {IMAGE} is not built: run `make image` first")
    return IMAGE


class Database:
    """A fresh PostgreSQL database for one test, reachable from host and containers."""

    def __init__(self) -> None:
        import psycopg

        self.name = f"everystep_img_{uuid.uuid4().hex[:10]}"
        self.url = f"{PG}/{self.name}"
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url) as conn:
            return conn.execute(sql, params).fetchall()

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test with the host PostgreSQL's ``database`` uses that server: no test that
    stops it runs beside it (tests/exclusive.py)."""
    for item in items:
        if "database" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.servers("postgres"))


@pytest.fixture
def database() -> Iterator[Database]:
    db = Database()
    yield db
    db.drop()


@pytest.fixture
def containers() -> Iterator[list[str]]:
    """Names of containers the test started; all are removed at teardown."""
    names: list[str] = []
    yield names
    for name in names:
        podman("rm", "-f", "-t", "0", name, check=False)


def host_runner(database: Database, *command: str) -> subprocess.CompletedProcess:
    """The runner on the host, with the example project, against the test database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVERYSTEP_")}
    env["DJANGO_SECRET_KEY"] = SECRET_KEY
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "everystep_runner",
            "--project-dir",
            str(EXAMPLE),
            "--settings-module",
            "mysite.settings",
            "--database-url",
            database.url,
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=True,
    )


def migrate_and_schedule(database: Database, count: int, wait: float = 0.0) -> None:
    host_runner(database, "migrate", "--noinput", "-v", "0")
    code = (
        "from everystep import schedule; from shop.workflows import fulfil; "
        f"[schedule(fulfil, i, {wait}) for i in range({count})]"
    )
    host_runner(database, "shell", "-c", code)
