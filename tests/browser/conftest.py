"""Fixtures of the real-browser tests: the ``demo`` role of ``everystep-runner`` on its own
SQLite file and a headless Chromium driven by Playwright.

These tests skip only when Chromium or Playwright is missing (under ``CI=true`` the suite's
conftest turns a skip into a failure). Setup on a Debian machine::

    apt-get install -y chromium
    .venv/bin/pip install playwright       # never `playwright install`: the Debian browser is used

The accessibility checks inject axe-core, pinned in ``package.json`` / ``package-lock.json``
beside this file: ``make browser`` runs ``npm ci`` here, and so does the ``axe_source``
fixture when ``node_modules`` is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
RUNNER = Path(sys.executable).with_name("everystep-runner")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
AXE = HERE / "node_modules" / "axe-core" / "axe.min.js"
# Screenshots a run leaves for people to look at (build/ is not in git).
SHOTS = ROOT / "build" / "screenshots"
STARTUP_TIMEOUT = 90.0  # migrate + gunicorn on a busy 2-core machine
SHUTDOWN_TIMEOUT = 60.0  # the demo drains its worker (nothing in flight by then)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _demo_env(data_dir: Path) -> dict[str, str]:
    # No developer configuration leaks in: every EVERYSTEP_* variable goes, and so does the
    # DJANGO_SETTINGS_MODULE pytest-django exported for the suite (the demo brings its own).
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("EVERYSTEP_") and key != "DJANGO_SETTINGS_MODULE"
    }
    env["EVERYSTEP_DEMO_DATA"] = str(data_dir)
    # The code under test is this checkout's, even where the venv's editable install
    # points at another one (a second work tree sharing the venv).
    checkout = [str(ROOT), str(ROOT / "image")]
    env["PYTHONPATH"] = os.pathsep.join(checkout + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _log_tail(log: Path, lines: int = 60) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_until_answering(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the demo exited early with {proc.returncode}:\n{_log_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    pytest.fail(f"the demo UI did not answer {url} in {STARTUP_TIMEOUT:.0f}s:\n{_log_tail(log)}")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(proc: subprocess.Popen[bytes]) -> tuple[int | None, bool]:
    """SIGTERM the demo's process group (runner, gunicorn, worker) and wait for the runner.

    Returns its exit code (None when it had to be killed) and whether anything of its group
    outlived it (then killed)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=SHUTDOWN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        return None, True
    # The runner waits for gunicorn and the worker; give stragglers a moment anyway. The
    # group id cannot be reused while one of its members is alive.
    deadline = time.monotonic() + 5
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not _group_alive(proc.pid):
        return proc.returncode, False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, True


@pytest.fixture(scope="module")
def chromium_path() -> str:
    path = shutil.which("chromium") or (CHROMIUM if os.access(CHROMIUM, os.X_OK) else None)
    if path is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return path


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's data directory (its SQLite file and log), one per test module."""
    return tmp_path_factory.mktemp("demo-data")


@pytest.fixture(scope="module")
def demo_url(demo_data: Path) -> Iterator[str]:
    """``everystep-runner --ui-bind 127.0.0.1:<port> demo`` on a fresh SQLite file; its URL."""
    if not RUNNER.exists():
        pytest.fail(f"{RUNNER} is missing: install the runner into this venv")
    data_dir = demo_data
    log = data_dir / "demo.log"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(RUNNER), "--ui-bind", f"127.0.0.1:{port}", "demo"],
            env=_demo_env(data_dir),
            cwd=data_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: teardown signals all of it
        )
    try:
        _wait_until_answering(f"{url}/healthz", proc, log)
        yield url
    finally:
        code, leftovers = _stop(proc)
    assert code == 0, f"the demo exited with {code} after SIGTERM:\n{_log_tail(log)}"
    assert not leftovers, f"processes of the demo outlived it:\n{_log_tail(log)}"


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class BrowserPage:
    """A fresh page on the demo, with what went wrong in it: console errors, uncaught page
    errors and failed responses (a missing favicon aside)."""

    page: Any
    base_url: str
    console_errors: list[str] = field(default_factory=list)

    def url(self, path: str = "/") -> str:
        return self.base_url + path

    def assert_no_console_errors(self) -> None:
        assert self.console_errors == [], "\n".join(self.console_errors)


def _is_favicon(url: str) -> bool:
    return url.rsplit("/", 1)[-1].startswith("favicon")


@pytest.fixture
def ui(browser: Any, demo_url: str) -> Iterator[BrowserPage]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    found = BrowserPage(page, demo_url)

    def on_console(message: Any) -> None:
        if message.type != "error":
            return
        where = (message.location or {}).get("url", "")
        if _is_favicon(where):
            return
        found.console_errors.append(f"console error at {where or page.url}: {message.text}")

    def on_response(response: Any) -> None:
        if response.status >= 400 and not _is_favicon(response.url):
            found.console_errors.append(f"HTTP {response.status} for {response.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: found.console_errors.append(f"page error: {error}"))
    page.on("response", on_response)
    try:
        yield found
    finally:
        context.close()


def save_screenshot(ui: BrowserPage, name: str) -> Path:
    """The whole page as ``build/screenshots/<name>``, checked to be a real picture."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / name
    ui.page.screenshot(path=str(path), full_page=True)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000, f"{path} is only {len(data)} bytes"
    return path


def demo_python(data_dir: Path, script: str) -> str:
    """Run ``script`` with Django set up on the demo's settings and database: how a test
    adds rows the six sample runs do not give. Returns what it printed."""
    env = _demo_env(data_dir) | {"DJANGO_SETTINGS_MODULE": "everystep_runner.demo.settings"}
    prelude = "import django; django.setup()\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + script],
        env=env,
        cwd=data_dir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="session")
def axe_source() -> str:
    """axe-core's ``axe.min.js``, installed from the lockfile by ``npm ci`` if missing."""
    if not AXE.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is missing: apt-get install -y npm (axe-core comes from it)")
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=HERE, capture_output=True, text=True
        )
        assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
    return AXE.read_text()


def axe_violations(page: Any, source: str) -> list[str]:
    """The axe-core violations of the page as loaded: one line per rule and element."""
    page.add_script_tag(content=source)
    found = page.evaluate(
        """async () => {
            const result = await axe.run(document, {resultTypes: ["violations"]});
            return result.violations.map(v => ({
                id: v.id, help: v.help, targets: v.nodes.map(n => n.target.join(" ")),
            }));
        }"""
    )
    return [
        f"{violation['id']} ({violation['help']}): {target}"
        for violation in found
        for target in violation["targets"]
    ]
