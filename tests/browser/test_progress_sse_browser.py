"""The progress example of docs/progress.md in a real browser (issue 38): the example
project (image/example_project) served by uvicorn on its own SQLite file, with a real
``everystep_worker``. A user holding ``shop.import_catalogue`` starts an import, and the
page's ``<progress>``, fed by the Server-Sent Events of ``shop.views.import_events``
(``everystep.awatch``), moves through values between 0 and 100 while the run goes and
ends at 100; a user without the permission gets 403 from the stream, and one with it
gets 404 for an import another user started."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import ROOT, _free_port, _is_favicon, _log_tail

EXAMPLE = ROOT / "image" / "example_project"
STARTUP_TIMEOUT = 90.0
RUN_TIMEOUT = 90.0  # the import takes about 5 s (100 rows, 50 ms each)

# Records every value the bar is given, as the page sets it (setting ``value`` on a
# <progress> sets its attribute), from before the page's own script runs.
RECORD_BAR = """
window.barValues = [];
new MutationObserver((records) => {
  for (const record of records) {
    if (record.target.id === "import-bar") window.barValues.push(record.target.value);
  }
}).observe(document, {subtree: true, attributes: true, attributeFilter: ["value"]});
"""

# Three users, their sessions and ids: the importer, a colleague who may import too,
# and a visitor who may not (Django's test client logs them in: sessions are rows in
# the project's database, so the served project accepts the cookies).
USERS = """
import json
from django.contrib.auth.models import Permission, User
from django.test import Client
importer = User.objects.create_user("importer")
importer.user_permissions.add(Permission.objects.get(content_type__app_label="shop",
                                                     codename="import_catalogue"))
colleague = User.objects.create_user("colleague")
colleague.user_permissions.add(Permission.objects.get(content_type__app_label="shop",
                                                      codename="import_catalogue"))
visitor = User.objects.create_user("visitor")
sessions, ids = {}, {}
for user in (importer, colleague, visitor):
    client = Client()
    client.force_login(user)
    sessions[user.username] = client.cookies["sessionid"].value
    ids[user.username] = user.pk
print(json.dumps({"sessions": sessions, "ids": ids}))
"""


@dataclass
class Shop:
    """The served example project: its URL, the users' session ids and user ids, its
    environment."""

    url: str
    sessions: dict[str, str]
    ids: dict[str, int]
    env: dict[str, str]

    def shell(self, code: str) -> str:
        return shell(self.env, code)


def example_env(data: Path) -> dict[str, str]:
    """The example project on ``data``'s SQLite file over plain HTTP, with this checkout's
    everystep and none of this environment's Django or everystep configuration."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("EVERYSTEP_") and key != "DJANGO_SETTINGS_MODULE"
    }
    env.update(
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        EXAMPLE_HTTPS="0",
        EXAMPLE_SQLITE_PATH=str(data / "shop.sqlite3"),
        PYTHONPATH=os.pathsep.join([str(EXAMPLE), str(ROOT)]),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def shell(env: dict[str, str], code: str) -> str:
    """What ``code`` printed, run by the example project's ``manage.py shell``."""
    return manage(env, "shell", "-v", "0", "-c", code)


@contextlib.contextmanager
def serving(
    command: list[str], env: dict[str, str], log: Path, clean: int = 0
) -> Iterator[subprocess.Popen]:
    """``command`` in the example project until the block ends; then SIGTERM, and it must
    exit with ``clean``."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            cwd=EXAMPLE,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            code = None
    assert code == clean, f"{command[2]} exited with {code}:\n{_log_tail(log)}"


def get(url: str, session: str | None = None, timeout: float = 10) -> tuple[int, str, str]:
    """Status, content type and body of a GET of ``url`` with that session cookie."""
    request = urllib.request.Request(url)
    if session is not None:
        request.add_header("Cookie", f"sessionid={session}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers["Content-Type"], refused.read().decode()


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    """The example project migrated, with its users, served by uvicorn and worked by an
    ``everystep_worker``."""
    data = tmp_path_factory.mktemp("shop")
    env = example_env(data)
    manage(env, "migrate", "--noinput", "-v", "0")
    users = json.loads(shell(env, USERS))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    uvicorn = [sys.executable, "-m", "uvicorn", "mysite.asgi:application"]
    uvicorn += ["--host", "127.0.0.1", "--port", str(port)]
    worker = [sys.executable, "manage.py", "everystep_worker", "--poll", "0.2"]
    with (
        # uvicorn shuts down, then dies of the SIGTERM it caught, as its exit status says.
        serving(uvicorn, env, data / "uvicorn.log", -signal.SIGTERM) as server,
        serving(worker, env, data / "worker.log"),
    ):
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            assert server.poll() is None, _log_tail(data / "uvicorn.log")
            with contextlib.suppress(OSError):
                if get(f"{url}/shop/imports/", timeout=2)[0] == 403:  # anonymous
                    break
            assert time.monotonic() < deadline, _log_tail(data / "uvicorn.log")
            time.sleep(0.25)
        yield Shop(url, users["sessions"], users["ids"], env)


def test_the_bar_moves_while_the_import_runs_and_ends_at_100(shop: Shop, browser: Any):
    """Started from the page, the import's bar takes several values between 0 and 100,
    in order, while the run goes (a watch of a finished run yields once), then 100; the
    stream's end event says completed and the page closes its EventSource."""
    context = browser.new_context()
    context.add_cookies(
        [{"name": "sessionid", "value": shop.sessions["importer"], "url": shop.url}]
    )
    context.add_init_script(RECORD_BAR)
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error" and not _is_favicon(message.location.get("url", "")):
            problems.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(str(error)))
    try:
        page.goto(f"{shop.url}/shop/imports/")
        page.get_by_role("button", name="Start an import").click()
        page.wait_for_url(re.compile(r"/shop/imports/[0-9a-f-]{36}/$"))
        page.wait_for_function(
            "document.getElementById('import-text').textContent.endsWith('(completed)')",
            timeout=RUN_TIMEOUT * 1000,
        )
        values = page.evaluate("window.barValues")
        shown = page.locator("#import-text").text_content()
        closed = page.evaluate("source.readyState === EventSource.CLOSED")
        run_id = page.url.rstrip("/").rsplit("/", 1)[1]
    finally:
        context.close()
    print(f"bar values: {values}")  # the report of issue 38 quotes them
    between = [value for value in values if 0 < value < 100]
    assert values == sorted(values) and values[-1] == 100, values
    assert len(set(between)) >= 3, values
    assert (shown, closed, problems) == ("100 of 100 rows (completed)", True, [])
    final = shop.shell(
        "import everystep; from everystep.models import Workflow; "
        f"print(Workflow.objects.get(id='{run_id}').status, everystep.published('{run_id}'))",
    )
    assert final.strip() == "completed {'import': {'done': 100, 'total': 100}}"


def test_the_stream_answers_only_the_imports_owner(shop: Shop):
    """The stream of a real import started for the importer: 403 for a user without
    ``shop.import_catalogue`` and for no user; 404 for a user with that permission who
    is not the import's owner; for the owner a text/event-stream of data events that
    ends with the end event once the run is final."""
    run_id = shop.shell(
        "from everystep import schedule; from shop.workflows import import_catalogue; "
        f"print(schedule(import_catalogue, 20, 0.01, {shop.ids['importer']}).id)",
    ).strip()
    events = f"{shop.url}/shop/imports/{run_id}/events/"
    assert get(events, shop.sessions["visitor"])[0] == 403
    assert get(events)[0] == 403
    assert get(events, shop.sessions["colleague"])[0] == 404
    status, content_type, body = get(events, shop.sessions["importer"], timeout=RUN_TIMEOUT)
    assert (status, content_type) == (200, "text/event-stream")
    chunks = body.strip().split("\n\n")
    assert chunks[-1] == 'event: end\ndata: {"status": "completed"}', chunks
    assert chunks[-2] == 'data: {"import": {"done": 20, "total": 20}}', chunks
    assert all(chunk.startswith("data: ") for chunk in chunks[:-1]), chunks
