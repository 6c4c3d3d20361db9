"""Issue 21: the example project behind compose.yaml is deployable as written: `manage.py
check --deploy` reports nothing with a production-like environment, and it refuses to start
without its own DJANGO_SECRET_KEY (no fixed fallback key)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "image" / "example_project"


def manage(*args: str, **env_vars: str) -> subprocess.CompletedProcess:
    """The example project's manage.py, with none of this process's Django or runner setup."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("EVERYSTEP_")}
    for name in ("DJANGO_SETTINGS_MODULE", "DJANGO_SECRET_KEY", "EXAMPLE_HTTPS"):
        env.pop(name, None)
    env.update(env_vars)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean() -> None:
    """`check --deploy --fail-level WARNING` passes with a secret key set and nothing else:
    security middleware, clickjacking, HTTPS, secure cookies and HSTS are all on."""
    result = manage(
        "check", "--deploy", "--fail-level", "WARNING", DJANGO_SECRET_KEY=secrets.token_urlsafe(50)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_no_secret_key_no_start() -> None:
    """Without DJANGO_SECRET_KEY the project does not start, and says what to set."""
    result = manage("check")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr
