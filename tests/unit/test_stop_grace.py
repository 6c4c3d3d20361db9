"""Every way the docs and the shipped configuration start a worker gives it longer to stop
than its drain (issue 53): `docker run`/`podman run` lines in the docs carry
`--stop-timeout` (Docker's default, 10 s, killed a 20 s step under a 30 s drain), and
compose.yaml, the Kubernetes StatefulSet and the systemd unit each wait longer than the
drain they set. One-shot roles (`migrate`, `config`, `demo`, `--entrypoint …`) are left
out: nothing drains there."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DRAIN = 30.0
ONE_SHOT = {"migrate", "config", "demo", "healthcheck", "check-replay", "shell", "ui"}


def _commands(text: str) -> list[str]:
    """The `docker run`/`podman run` commands of the fenced shell blocks, continuations
    joined."""
    found = []
    for block in re.findall(r"```(?:sh|shell|bash|console)?\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("#", 1)[0].strip()
            if re.match(r"(docker|podman) run\b", line):
                found.append(line)
    return found


def _runs_a_worker(words: list[str]) -> bool:
    if "--entrypoint" in words or "everystep-runner" not in words:
        return False
    after = words[words.index("everystep-runner") + 1 :]
    role = next((w for w in after if not w.startswith("-") and "=" not in w), "worker")
    return role not in ONE_SHOT and not any(w in ONE_SHOT for w in after)


def _drain(words: list[str]) -> float:
    for i, word in enumerate(words):
        if word.startswith("EVERYSTEP_DRAIN="):
            return float(word.split("=", 1)[1])
        if word == "--drain":
            return float(words[i + 1])
    return DEFAULT_DRAIN


def test_every_worker_in_the_docs_is_given_longer_to_stop_than_its_drain():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    checked = 0
    for page in pages:
        for command in _commands(page.read_text(encoding="utf-8")):
            words = shlex.split(command.replace("…", "x"))
            if not _runs_a_worker(words):
                continue
            checked += 1
            assert "--stop-timeout" in words, f"{page.name}: no --stop-timeout in {command}"
            grace = float(words[words.index("--stop-timeout") + 1])
            assert grace > _drain(words), f"{page.name}: stop timeout <= drain in {command}"
    assert checked >= 3, "the docs' worker lines were not found"


def test_compose_gives_each_worker_longer_than_its_drain():
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    workers = {
        name: service
        for name, service in services.items()
        if "everystep-runner" in str(service.get("image", ""))
        and service.get("command", ["worker"])[0] not in ONE_SHOT
    }
    assert len(workers) >= 2
    for name, service in workers.items():
        drain = float(service.get("environment", {}).get("EVERYSTEP_DRAIN", DEFAULT_DRAIN))
        grace = float(str(service.get("stop_grace_period", "10s")).rstrip("s"))
        assert grace > drain, name


def test_the_statefulset_and_the_systemd_unit_wait_longer_than_their_drain():
    documents = yaml.safe_load_all((ROOT / "config/kubernetes/statefulset.yaml").read_text())
    (statefulset,) = [doc for doc in documents if doc and doc["kind"] == "StatefulSet"]
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["terminationGracePeriodSeconds"] > _drain(container["args"])
    unit = (ROOT / "config/systemd/everystep-worker@.service").read_text()
    start = re.search(r"^ExecStart=(.*)$", unit, re.M)
    stop = re.search(r"^TimeoutStopSec=(\d+)$", unit, re.M)
    assert start and stop
    assert float(stop.group(1)) > _drain(start.group(1).split())


def test_every_podman_build_in_the_docs_keeps_the_healthcheck() -> None:
    """podman builds OCI images by default, which have no HEALTHCHECK: it is dropped
    without a word. Every `podman build` the docs show says `--format docker`."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    builds = [
        (page.name, line)
        for page in pages
        for line in page.read_text(encoding="utf-8").splitlines()
        if "podman build" in line and not line.lstrip().startswith("#")
    ]
    assert builds, "no podman build line found: the check reads nothing"
    assert [build for build in builds if "--format docker" not in build[1]] == []
