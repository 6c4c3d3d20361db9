"""Issue 21, the runner's side: the ``demo`` role never touches a database but its own SQLite
file and binds 127.0.0.1 by default; ``everystep-runner config`` and its errors never show a
database secret, nor an unparseable URL, from any source."""

from __future__ import annotations

import os
import secrets
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from everystep_runner import demo
from everystep_runner import settings as runner_settings
from everystep_runner.cli import main
from everystep_runner.settings import describe, load

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "image" / "example_project"


@pytest.fixture(autouse=True)
def _no_default_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner.toml on the developer's machine must not leak into these tests."""
    monkeypatch.setattr(runner_settings, "DEFAULT_CONFIG", tmp_path / "absent" / "runner.toml")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def runner_env(tmp_path: Path, **more: str) -> dict[str, str]:
    """This environment without EVERYSTEP_* or a Django settings module, HOME in tmp_path."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("EVERYSTEP_")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update({"HOME": str(tmp_path), "EVERYSTEP_DEMO_DATA": str(tmp_path / "demo-data")})
    return {**env, **more}


def runner(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "everystep_runner", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
    )


def real_database(tmp_path: Path) -> str:
    """A SQLite file of the example project holding one scheduled run; its URL."""
    url = f"sqlite:///{tmp_path / 'real.sqlite3'}"
    project = ("--project-dir", str(EXAMPLE), "--settings-module", "mysite.settings")
    env = runner_env(tmp_path, DJANGO_SECRET_KEY=secrets.token_urlsafe(50))
    schedule = (
        "from everystep import schedule; from shop.workflows import fulfil; schedule(fulfil, 7)"
    )
    for command in (["migrate", "--noinput", "-v", "0"], ["shell", "-c", schedule]):
        done = runner(env, *project, "--database-url", url, *command)
        assert done.returncode == 0, done.stderr
    return url


def runs(url: str) -> list[tuple[str, str, str | None]]:
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT name, status, claimed_by FROM everystep_workflow").fetchall()


def answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("via", ["env", "env-file"])
def test_demo_refuses_a_database_url_and_leaves_its_runs_alone(tmp_path: Path, via: str) -> None:
    """The real `demo` role given EVERYSTEP_DATABASE_URL(_FILE) to a database holding a
    scheduled run exits 2 saying why: the run is untouched, no demo run is written, the
    demo's own file is not created and nothing is served."""
    url = real_database(tmp_path)
    before = runs(url)
    assert before == [("shop.fulfil", "scheduled", None)]
    if via == "env":
        env = runner_env(tmp_path, EVERYSTEP_DATABASE_URL=url)
    else:
        secret = tmp_path / "database-url"
        secret.write_text(url + "\n")
        env = runner_env(tmp_path, EVERYSTEP_DATABASE_URL_FILE=str(secret))
    port = free_port()
    result = runner(env, "--ui-bind", f"127.0.0.1:{port}", "demo", timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    origin = "env EVERYSTEP_DATABASE_URL" + ("_FILE" if via == "env-file" else "")
    assert f"refusing to start: database_url is set (from {origin}" in result.stderr
    assert "Traceback" not in result.stderr
    assert runs(url) == before
    assert not (tmp_path / "demo-data" / "demo.sqlite3").exists()
    assert not answers(port)


def test_demo_refuses_a_settings_module(tmp_path: Path) -> None:
    """A settings module (another project, its database) is refused the same way."""
    env = runner_env(tmp_path, EVERYSTEP_SETTINGS_MODULE="mysite.settings")
    result = runner(env, "--ui-bind", f"127.0.0.1:{free_port()}", "demo", timeout=60)
    assert result.returncode == 2
    assert "settings_module is set (from env EVERYSTEP_SETTINGS_MODULE)" in result.stderr


def test_demo_binds_loopback_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's UI address is 127.0.0.1:8000 by default; a given ui_bind wins."""
    assert load().ui_bind == "0.0.0.0:8000"  # the ui role's default is not the demo's
    assert demo.bind(load()) == "127.0.0.1:8000"
    assert demo.bind(load({"ui_bind": "0.0.0.0:8000"})) == "0.0.0.0:8000"
    monkeypatch.setenv("EVERYSTEP_UI_BIND", "127.0.0.1:9001")
    assert demo.bind(load()) == "127.0.0.1:9001"


# --- secrets in the config report and its errors ---------------------------------------

SECRET = "Zq7secretvalue"


@pytest.mark.parametrize(
    "key",
    ["password", "sslpassword", "passfile", "PassWord", "api_token", "client_secret", "sslkey"],
)
def test_config_masks_each_secret_query_key(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """A secret-bearing query value is masked in the config report; other keys are kept."""
    url = f"postgres://app:{SECRET}@db:5432/app?sslmode=require&{key}={SECRET}&connect_timeout=5"
    monkeypatch.setenv("EVERYSTEP_DATABASE_URL", url)
    lines = [line for line in describe(load()) if line.startswith("database_url")]
    assert lines == [
        f"database_url = postgres://app:***@db:5432/app?sslmode=require&{key}=***"
        "&connect_timeout=5  (env EVERYSTEP_DATABASE_URL)"
    ]


def test_config_masks_a_secret_after_an_at_sign_in_the_query(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An "@" in a query value does not hide where the query starts (the real config role)."""
    url = f"postgres://db/app?application_name=a@b&password={SECRET}#{SECRET}"
    monkeypatch.setenv("EVERYSTEP_DATABASE_URL", url)
    main(["--project-dir", "/nonexistent", "config"])
    out = capsys.readouterr().out
    assert "database_url = postgres://db/app?application_name=a@b&password=***#***" in out
    assert SECRET not in out


UNPARSEABLE = [
    f"postgres:/app:{SECRET}@db/app",  # one slash: no scheme the parser knows
    f"postgres://app:{SECRET}@db:99999/app",  # port out of range
    f"redis://app:{SECRET}@db/0",
    f"{SECRET}",
]


def given(source: str, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Give ``url`` as database_url from ``source``; the runner flags that go with it."""
    if source == "env":
        monkeypatch.setenv("EVERYSTEP_DATABASE_URL", url)
    elif source == "env-file":
        path = tmp_path / "database-url"
        path.write_text(url + "\n")
        monkeypatch.setenv("EVERYSTEP_DATABASE_URL_FILE", str(path))
    elif source == "toml":
        path = tmp_path / "runner.toml"
        path.write_text(f'database_url = "{url}"\n')
        return ["--config", str(path)]
    else:
        return ["--database-url", url]
    return []


@pytest.mark.parametrize("url", UNPARSEABLE, ids=["one-slash", "port", "scheme", "bare"])
@pytest.mark.parametrize("source", ["env", "env-file", "toml", "flag"])
def test_unparseable_url_is_never_echoed(
    url: str,
    source: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A database URL that does not parse is reported without any of its text, from any
    source: `everystep-runner config` exits 2 naming the setting and where it came from."""
    flags = given(source, url, tmp_path, monkeypatch)
    code = main([*flags, "config"])
    captured = capsys.readouterr()
    assert code == 2
    assert "database_url: expected " in captured.err
    assert "got a value not shown here (it may hold a password)" in captured.err
    assert SECRET not in captured.out + captured.err
    assert "@db" not in captured.err
