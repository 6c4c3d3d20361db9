"""Issue 21: dependency floors exclude releases with known advisories, and the runner image
installs exactly the versions image/constraints.txt pins, all of which the floors admit."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.packaging.conftest import ROOT

CONSTRAINTS = ROOT / "image" / "constraints.txt"
# Extras of the library the Dockerfile installs.
IMAGE_EXTRAS = ("postgres", "mysql", "metrics", "sentry", "tasks")


def pins() -> dict[str, Version]:
    """image/constraints.txt as canonical name -> version; every line must be an exact pin."""
    found: dict[str, Version] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s;]+)", line)
        assert match, f"not an exact pin in {CONSTRAINTS.name}: {line!r}"
        name = canonicalize_name(match[1])
        assert name not in found, f"{name} pinned twice"
        found[name] = Version(match[2])
    return found


def requirements(pyproject: Path, extras: tuple[str, ...] = ()) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text())["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def image_requirements() -> list[Requirement]:
    """What the Dockerfile asks for: the library with its image extras, and the runner."""
    runner = requirements(ROOT / "image" / "pyproject.toml")
    library = requirements(ROOT / "pyproject.toml", IMAGE_EXTRAS)
    return [req for req in [*library, *runner] if canonicalize_name(req.name) != "everystep"]


def floor(requirement: Requirement) -> Version:
    lows = [Version(spec.version) for spec in requirement.specifier if spec.operator == ">="]
    assert lows, f"{requirement} has no floor"
    return max(lows)


def test_floors_exclude_releases_with_advisories() -> None:
    """Django's floor is a 5.2 security release (5.2.17); gunicorn's is 23.0, past the
    request-smuggling fix: the floors a user's resolver sees, not only the image's pins."""
    by_name = {canonicalize_name(req.name): req for req in image_requirements()}
    assert floor(by_name["django"]) >= Version("5.2.17")
    assert not by_name["django"].specifier.contains("5.2.16")
    assert floor(by_name["gunicorn"]) >= Version("23.0")
    assert not by_name["gunicorn"].specifier.contains("22.0.0")


def test_constraints_pin_every_image_requirement_within_its_floor() -> None:
    """Each distribution the image requires is pinned, at a version its specifier admits
    (so refreshing the pins cannot go below a floor)."""
    pinned = pins()
    for requirement in image_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{name} is not pinned in {CONSTRAINTS.name}"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]}"
    assert {"pip", "setuptools"} <= pinned.keys()  # the installer and the build backend


def test_dockerfile_installs_with_the_constraints() -> None:
    """Every pip install in the Dockerfile's build stage is given the constraints file."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ARG CONSTRAINTS=/src/image/constraints.txt" in dockerfile
    installs = re.findall(r"/opt/everystep/bin/pip install([^;]*)", dockerfile)
    assert len(installs) == 2
    assert all('-c "$CONSTRAINTS"' in install for install in installs)
    # The build backend comes from the pinned venv, not a fresh isolated download.
    assert "--no-build-isolation" in installs[1]
