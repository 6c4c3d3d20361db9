"""The everystep-runner image built from the Dockerfile, run with podman."""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from pathlib import Path

import pytest

from tests.image.conftest import (
    EXAMPLE,
    SECRET_KEY,
    Database,
    assert_hardened,
    host_runner,
    migrate_and_schedule,
    podman,
    run,
    wait_for,
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def completed_by(database: Database, runner: str) -> int:
    rows = database.query(
        "SELECT count(*) FROM everystep_workflow WHERE status = 'completed' AND claimed_by = %s",
        runner,
    )
    return rows[0][0]


def start(
    containers: list[str],
    image: str,
    name: str,
    *args: str,
    env: dict[str, str],
    extra: tuple[str, ...] = (),
) -> str:
    env_flags = [item for key, value in env.items() for item in ("-e", f"{key}={value}")]
    podman("rm", "-f", "-t", "0", name, check=False)  # left over by an interrupted run
    run(
        "-d",
        "--name",
        name,
        "--network",
        "host",
        "-v",
        f"{EXAMPLE}:/app:ro",
        *env_flags,
        *extra,
        image,
        *args,
    )
    containers.append(name)
    return name


def project_env(database: Database, **more: str) -> dict[str, str]:
    """The example project on the test database, served over plain HTTP as in compose; the
    probe port a free one (the containers share the host's network, the image says 9117)."""
    return {
        "DJANGO_SETTINGS_MODULE": "mysite.settings",
        "DJANGO_SECRET_KEY": SECRET_KEY,
        "EXAMPLE_HTTPS": "0",
        "EVERYSTEP_DATABASE_URL": database.url,
        "EVERYSTEP_METRICS_PORT": str(free_port()),
        **more,
    }


def exit_code(name: str) -> int:
    state = json.loads(podman("inspect", name).stdout)[0]["State"]
    return int(state["ExitCode"])


def test_env_configured_worker_runs_host_scheduled_runs_and_drains(image, database, containers):
    """Configured by environment only: runs complete, the HEALTHCHECK passes, and
    `podman stop` drains a run in flight (exit 0, nothing left claimed)."""
    migrate_and_schedule(database, 5)
    port = str(free_port())
    name = start(
        containers,
        image,
        "es-env-worker",
        env=project_env(
            database, EVERYSTEP_NAME="env-worker", EVERYSTEP_METRICS_PORT=port, EVERYSTEP_POOL="3"
        ),
    )
    wait_for(lambda: completed_by(database, "env-worker") == 5, 120, "5 runs", name)
    assert podman("healthcheck", "run", name, check=False).returncode == 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as resp:
        assert resp.status == 200

    migrate_and_schedule(database, 1, wait=20.0)  # one long run to catch mid-step
    wait_for(
        lambda: (
            database.query("SELECT count(*) FROM everystep_workflow WHERE status = 'running'")[0][0]
            == 1
        ),
        60,
        "the long run",
        name,
    )
    podman("stop", "-t", "60", name, timeout=120)
    assert exit_code(name) == 0
    assert (
        database.query(
            "SELECT count(*) FROM everystep_workflow WHERE status = 'running' "
            "OR claimed_by IS NOT NULL AND status = 'scheduled'"
        )[0][0]
        == 0
    )
    logs = podman("logs", name).stdout
    assert "draining" in logs


def test_mounted_toml_configures_the_worker(image, database, containers, tmp_path: Path):
    """A TOML file mounted at the default path configures the worker."""
    migrate_and_schedule(database, 4)
    toml = tmp_path / "runner.toml"
    toml.write_text(
        f'name = "toml-worker"\npool = 2\nsettings_module = "mysite.settings"\n'
        f'database_url = "{database.url}"\nmetrics_port = {free_port()}\n'
    )
    toml.chmod(0o644)
    name = start(
        containers,
        image,
        "es-toml-worker",
        env={"DJANGO_SECRET_KEY": SECRET_KEY},
        extra=("-v", f"{toml}:/etc/everystep/runner.toml:ro"),
    )
    wait_for(lambda: completed_by(database, "toml-worker") == 4, 120, "4 runs", name)
    podman("stop", "-t", "60", name, timeout=120)
    assert exit_code(name) == 0


def test_seed_argument_list_works_as_written(image, database, containers):
    """`everystep_worker --pool 8 --name … --drain 30` is passed to the project's manage.py."""
    migrate_and_schedule(database, 3)
    name = start(
        containers,
        image,
        "es-seed",
        "everystep_worker",
        "--pool",
        "8",
        "--name",
        "seed-0",
        "--drain",
        "30",
        env=project_env(database, EVERYSTEP_METRICS_PORT=str(free_port())),
    )
    wait_for(lambda: completed_by(database, "seed-0") == 3, 120, "3 runs", name)
    podman("stop", "-t", "60", name, timeout=120)
    assert exit_code(name) == 0


def test_runs_as_non_root_and_under_an_arbitrary_uid(image, database, containers):
    """The image's user is not root, and the worker also runs under --user 12345."""
    uid = run("--rm", "--entrypoint", "id", image, "-u").stdout.strip()
    assert uid == "10001"
    migrate_and_schedule(database, 2)
    name = start(
        containers,
        image,
        "es-uid",
        env=project_env(
            database, EVERYSTEP_NAME="uid-worker", EVERYSTEP_METRICS_PORT=str(free_port())
        ),
        extra=("--user", "12345"),
    )
    wait_for(lambda: completed_by(database, "uid-worker") == 2, 120, "2 runs", name)
    assert podman("exec", name, "id", "-u").stdout.strip() == "12345"
    assert podman("healthcheck", "run", name, check=False).returncode == 0
    podman("stop", "-t", "60", name, timeout=120)
    assert exit_code(name) == 0


@pytest.mark.parametrize(
    "args, env, message",
    [
        (("--pool", "0"), {}, "pool: expected an integer >= 1, got '0' (from flag --pool)"),
        ((), {"EVERYSTEP_POLL": "soon"}, "poll: expected"),
        ((), {}, "no Django settings module"),
    ],
)
def test_bad_configuration_fails_with_one_clear_message(image, args, env, message):
    """Invalid settings or a missing project end at start-up with a message, no traceback."""
    env_flags = [item for key, value in env.items() for item in ("-e", f"{key}={value}")]
    result = run("--rm", *env_flags, image, *args, check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_config_shows_the_processes_a_worker_starts(image, tmp_path: Path):
    """`config` shows processes as a mounted TOML gives it, and `auto` as the count the
    container's CPU limit stands for, with the cgroup file it was read from."""
    toml = tmp_path / "runner.toml"
    toml.write_text("processes = 4\n")
    toml.chmod(0o644)
    project = ("-v", f"{EXAMPLE}:/app:ro", "-e", "DJANGO_SETTINGS_MODULE=mysite.settings")
    project += ("-e", f"DJANGO_SECRET_KEY={SECRET_KEY}")
    mounted = ("-v", f"{toml}:/etc/everystep/runner.toml:ro")
    given = run("--rm", *project, *mounted, image, "config").stdout.splitlines()
    assert "processes = 4  (toml /etc/everystep/runner.toml)" in given
    # Two CPUs (as many as a CI machine has): the quota is the figure shown, not the
    # cores the container sees. cgroup v2 has it in cpu.max, v1 (CI machines) in
    # cpu.cfs_quota_us and cpu.cfs_period_us.
    auto = ("--cpus", "2", "-e", "EVERYSTEP_PROCESSES=AUTO")
    lines = run("--rm", *project, *auto, image, "config").stdout.splitlines()
    (line,) = [line for line in lines if line.startswith("processes = ")]
    assert re.fullmatch(
        r"processes = auto → 2 processes \(cgroup cpu(\.max|\.cfs_quota_us) 200000 100000\)"
        r"  \(env EVERYSTEP_PROCESSES\)",
        line,
    ), line


def test_demo_role_serves_the_ui(image, containers):
    """`demo` runs the bundled project on SQLite with a worker and serves the UI."""
    port = free_port()
    podman("rm", "-f", "-t", "0", "es-demo", check=False)
    # Inside its own network namespace the demo must listen on 0.0.0.0 to be published;
    # the port is published on the host's loopback only.
    bind = ("--ui-bind", "0.0.0.0:8000")
    run("-d", "--name", "es-demo", "-p", f"127.0.0.1:{port}:8000", image, *bind, "demo")
    containers.append("es-demo")

    def page() -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                body = resp.read().decode()
                return body if resp.status == 200 and "completed" in body else None
        except OSError:
            return None

    body = wait_for(page, 120, "the demo UI with a completed run", "es-demo")
    assert "demo.place_order" in body
    podman("stop", "-t", "60", "es-demo", timeout=120)
    assert exit_code("es-demo") == 0


def test_ui_role_serves_under_gunicorn(image, database, containers):
    """The `ui` role serves the health endpoint and the staff login page under gunicorn,
    and the HEALTHCHECK passes."""
    host_runner(database, "migrate", "--noinput", "-v", "0")
    port = free_port()
    env = project_env(database, EVERYSTEP_UI_BIND=f"127.0.0.1:{port}")
    name = start(containers, image, "es-ui", "ui", env=env)

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                return resp.status == 200
        except OSError:
            return False

    wait_for(healthy, 120, "the UI's /healthz", name)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
        assert resp.status == 200
        assert "login" in resp.url
    assert podman("healthcheck", "run", name, check=False).returncode == 0
    # The role's own probes, on the probe port; and no gunicorn control socket (its
    # directory under the read-only HOME could not even be made).
    probes = env["EVERYSTEP_METRICS_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{probes}/healthz", timeout=5) as resp:
        assert resp.read() == b"ok\n"
    assert "control socket" not in podman("logs", name).stdout.lower()
    podman("stop", "-t", "60", name, timeout=120)
    assert exit_code(name) == 0


def test_containers_run_hardened(image, containers):
    """The flags every test runs with are really applied (see `assert_hardened`)."""
    name = start(
        containers, image, "es-hardened", "infinity", env={}, extra=("--entrypoint", "sleep")
    )
    assert_hardened(name)


def test_check_replay_role_checks_the_database_against_the_image_code(image, database):
    """`everystep-runner check-replay`, as a pre-deploy CI step or Kubernetes Job runs it:
    the image's code against the database; exit status 1 names a run that would fail."""
    migrate_and_schedule(database, 2)
    retire = (
        "from everystep.models import Workflow; "
        "print(Workflow.objects.create(name='shop.workflows.retired', args=[1]).id)"
    )
    # The last line: the shell may announce its automatic imports first.
    retired = host_runner(database, "shell", "-c", retire).stdout.strip().splitlines()[-1]
    env = [item for k, v in project_env(database).items() for item in ("-e", f"{k}={v}")]
    common = ("--rm", "--network", "host", "-v", f"{EXAMPLE}:/app:ro", *env, image)
    failing = run(*common, "check-replay", check=False)
    assert failing.returncode == 1, failing.stderr
    assert f"run {retired} (scheduled): no @workflow is registered under " in failing.stdout
    assert "'shop.workflows.retired'" in failing.stdout
    host_runner(
        database,
        "shell",
        "-c",
        f"from everystep.models import Workflow; Workflow.objects.filter(id='{retired}').delete()",
    )
    passing = run(*common, "check-replay", "--json", check=False)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    report = json.loads(passing.stdout)
    assert report["ok"] is True and report["checked"] >= 2


def test_the_worker_runs_django_tasks_of_the_mounted_project(image, database, containers):
    """A @task of the mounted project, enqueued on the host, runs in the image's worker
    (Django 5.2 with the django-tasks backport the image ships) as a durable workflow:
    its step recorded, its result stored."""
    host_runner(database, "migrate", "--noinput", "-v", "0")
    code = (
        "from shop.tasks import send_receipt; "
        "[send_receipt.enqueue(i, channel='sms') for i in range(3)]"
    )
    host_runner(database, "shell", "-c", code)
    name = start(
        containers,
        image,
        "es-task-worker",
        env=project_env(database, EVERYSTEP_NAME="task-worker"),
    )

    def done() -> int:
        rows = database.query(
            "SELECT count(*) FROM everystep_workflow WHERE name = 'shop.tasks.send_receipt' "
            "AND status = 'completed' AND queue = 'default'"
        )
        return rows[0][0]

    wait_for(lambda: done() == 3, 120, "3 task runs", name)
    steps = database.query(
        "SELECT count(*) FROM everystep_step s JOIN everystep_workflow w "
        "ON s.workflow_id = w.id WHERE w.name = 'shop.tasks.send_receipt'"
    )
    assert steps[0][0] == 3, "one recorded step per task run"
    results = database.query(
        "SELECT result FROM everystep_workflow WHERE name = 'shop.tasks.send_receipt'"
    )
    assert sorted(str(row[0]) for row in results) == [
        "sms:receipt-0",
        "sms:receipt-1",
        "sms:receipt-2",
    ]
    podman("stop", "-t", "30", name, timeout=60)
    assert exit_code(name) == 0
