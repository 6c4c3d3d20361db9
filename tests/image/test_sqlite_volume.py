"""SQLite in a volume (issue 53), with the built image: a fresh directory its user cannot
write is one line for a one-shot command (exit 2, no traceback); a worker says the same
and waits, and starts once the directory is writable, without a restart; the database it
creates is group-writable, so a container under an arbitrary UID (group 0) writes it
too."""

from __future__ import annotations

import stat
from pathlib import Path

from tests.image.conftest import EXAMPLE, SECRET_KEY, podman, run, wait_for
from tests.image.test_image import exit_code, free_port, start


def logs(name: str) -> str:
    result = podman("logs", name, check=False)
    return result.stdout + result.stderr


def test_a_fresh_volume_is_one_line_then_works_once_writable(image, containers, tmp_path: Path):
    volume = tmp_path / "data"
    volume.mkdir()
    volume.chmod(0o755)  # root's, as a fresh volume is: not writable by UID 10001
    env = {
        "DJANGO_SETTINGS_MODULE": "mysite.settings",
        "DJANGO_SECRET_KEY": SECRET_KEY,
        "EXAMPLE_HTTPS": "0",
        "EVERYSTEP_DATABASE_URL": "sqlite:////data/db.sqlite3",
        "EVERYSTEP_METRICS_PORT": str(free_port()),
        "EVERYSTEP_NAME": "sqlite-worker",
    }
    env_flags = [item for key, value in env.items() for item in ("-e", f"{key}={value}")]
    mounts = ("-v", f"{EXAMPLE}:/app:ro", "-v", f"{volume}:/data")

    def migrate(*user: str) -> object:
        return run(
            "--rm",
            "--network",
            "host",
            *mounts,
            *env_flags,
            *user,
            image,
            "migrate",
            "-v",
            "0",
            check=False,
        )

    refused = migrate()
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    assert (
        "everystep-runner: SQLite database /data/db.sqlite3: the directory /data (owner 0:0, "
        "mode drwxr-xr-x) is not writable by UID 10001 (group 0)"
    ) in refused.stderr

    name = start(containers, image, "es-sqlite-volume", env=env, extra=("-v", f"{volume}:/data"))
    wait_for(lambda: "waiting until it is" in logs(name), 60, "the worker's line", name)
    volume.chmod(0o775)  # group 0 may write now
    migrated = migrate()
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert stat.S_IMODE((volume / "db.sqlite3").stat().st_mode) == 0o664
    wait_for(lambda: "starting: pool" in logs(name), 60, "the worker to start", name)
    assert "the SQLite database is writable now: starting" in logs(name)
    # Another UID of group 0 writes the same database.
    other = migrate("--user", "12345:0")
    assert other.returncode == 0, other.stdout + other.stderr
    podman("stop", "-t", "60", name, timeout=120)
    assert exit_code(name) == 0
