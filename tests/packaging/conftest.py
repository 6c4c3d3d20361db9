"""The quickstart tier: the built distributions, and a fresh virtualenv with the wheel.

Slow (a build of each distribution, a virtualenv and Django from the package index), so
these are session fixtures, built once. ``make quickstart`` runs this tier.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Distribution -> the directory its pyproject.toml is in.
SOURCES = {"everystep": ROOT, "everystep_runner": ROOT / "image"}


@dataclass(frozen=True)
class Distribution:
    """The sdist and the wheel ``python -m build`` made of one distribution."""

    name: str
    sdist: Path
    wheel: Path


def run(args: list[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; a non-zero exit fails the test with its output."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would leak the test suite into a user's
    project: Django settings, everystep configuration, Python paths, this virtualenv."""
    dropped = ("DJANGO_", "EVERYSTEP_", "PYTHON", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    return env | extra


@pytest.fixture(scope="session")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Distribution]:
    """Both distributions, built from this checkout as a release would build them: the
    sdist first, then the wheel from the sdist (``python -m build``, isolated)."""
    out = tmp_path_factory.mktemp("dist")
    built = {}
    for name, source in SOURCES.items():
        run([sys.executable, "-m", "build", "--outdir", out, source], env=clean_env())
        (sdist,) = out.glob(f"{name}-*.tar.gz")
        (wheel,) = out.glob(f"{name}-*-py3-none-any.whl")
        built[name] = Distribution(name, sdist, wheel)
    return built


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory, distributions: dict[str, Distribution]) -> Path:
    """A new virtualenv with the library's wheel installed (Django comes as its
    dependency, from the package index); returns its ``bin`` directory. Its Python is this
    one, or ``QUICKSTART_PYTHON`` (a Python >= 3.12 gets Django 6 from the index)."""
    home = tmp_path_factory.mktemp("venv") / "venv"
    python = os.environ.get("QUICKSTART_PYTHON") or sys.executable
    run([python, "-m", "venv", home], env=clean_env())
    wheel = distributions["everystep"].wheel
    run([home / "bin" / "python", "-m", "pip", "install", "--quiet", wheel], env=clean_env())
    return home / "bin"
