"""A project with third-party packages in the runner image, the documented way (issue 53;
docs/running/runner-image.md#a-project-with-dependencies): an image derived FROM the
runner's that installs the project's requirements — Django REST framework and a package
of the project's own — builds first try with the documented Dockerfile, loads the project
and runs its workflows; the runner's own image, given the same project, says in one line
which package is missing and where it goes."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.image.conftest import EXAMPLE, SECRET_KEY, podman, run, wait_for

# The Dockerfile of docs/running/runner-image.md, its FROM line aside.
DOCUMENTED = """\
FROM {image}
USER root
COPY . /app
RUN pip install --no-cache-dir -r /app/requirements.txt
USER 10001
"""
SETTINGS = """\
from mysite.settings import *  # noqa: F403

import shoptools  # the project's own package, installed from requirements.txt

INSTALLED_APPS = [*INSTALLED_APPS, "rest_framework"]  # noqa: F405
SHOP_CURRENCY = shoptools.CURRENCY
"""
# No registry is reachable from CI's builds: pip takes the packages from a directory the
# host filled (pip.conf, mounted for the build only), as a private index would serve them.
PIP_CONF = "[global]\nno-index = true\nfind-links = /wheels\n"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example project with DRF in INSTALLED_APPS and a package of its own."""
    root = tmp_path_factory.mktemp("derived") / "project"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__", "*.sqlite3"))
    (root / "depsite.py").write_text(SETTINGS)
    package = root / "packages" / "shoptools"
    (package / "shoptools").mkdir(parents=True)
    (package / "shoptools" / "__init__.py").write_text('CURRENCY = "EUR"\n')
    (package / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "shoptools"
            version = "1.0"
            """
        )
    )
    (root / "requirements.txt").write_text("djangorestframework\n./packages/shoptools\n")
    return root


@pytest.fixture(scope="module")
def derived(image: str, project: Path) -> Iterator[str]:
    wheels = project.parent / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheels),
         "djangorestframework", "setuptools>=61", "--no-deps"],
        check=True, timeout=300,
    )  # fmt: skip
    (project.parent / "pip.conf").write_text(PIP_CONF)
    (project / "Dockerfile").write_text(DOCUMENTED.format(image=image))
    tag = f"localhost/everystep-derived:{uuid.uuid4().hex[:8]}"
    podman(
        "build", "--format", "docker", "-t", tag,
        "-v", f"{wheels}:/wheels:ro", "-v", f"{project.parent / 'pip.conf'}:/etc/pip.conf:ro",
        str(project), timeout=600,
    )  # fmt: skip
    yield tag
    podman("rmi", "-f", tag, check=False)


def test_the_derived_image_loads_the_project_and_runs_its_workflows(derived, database):
    env = ["-e", f"DJANGO_SECRET_KEY={SECRET_KEY}", "-e", "EXAMPLE_HTTPS=0",
           "-e", "DJANGO_SETTINGS_MODULE=depsite", "-e", f"EVERYSTEP_DATABASE_URL={database.url}",
           "--network", "host"]  # fmt: skip
    config = run("--rm", *env, derived, "config", check=False)
    assert config.returncode == 0, config.stdout + config.stderr
    assert "project: ok (depsite;" in config.stdout
    assert run("--rm", *env, derived, "migrate", "--noinput", "-v", "0").returncode == 0
    code = (
        "from everystep import schedule; from shop.workflows import fulfil; schedule(fulfil, 1, 0)"
    )
    run("--rm", *env, derived, "shell", "-c", code)
    name = f"es-derived-{uuid.uuid4().hex[:6]}"
    run("-d", "--name", name, *env, "-e", "EVERYSTEP_NAME=derived", derived)
    try:
        done = "SELECT count(*) FROM everystep_workflow WHERE status = 'completed'"
        wait_for(lambda: database.query(done)[0][0] == 1, 120, "the run", name)
        assert database.query(done)[0][0] == 1, podman("logs", name).stdout
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def test_the_runners_own_image_names_the_missing_package_and_the_way(image, project):
    mounted = ["-v", f"{project}:/app:ro", "-e", f"DJANGO_SECRET_KEY={SECRET_KEY}",
               "-e", "DJANGO_SETTINGS_MODULE=depsite"]  # fmt: skip
    done = run("--rm", *mounted, image, "worker", check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    # podman's own lines (its healthcheck timer, without systemd here) aside.
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("everystep-runner")]
    assert "'shoptools', which is not installed in this image" in line
    assert "derived FROM everystep-runner" in line
    assert "Traceback" not in done.stdout + done.stderr
