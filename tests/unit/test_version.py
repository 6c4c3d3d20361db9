"""One version number: the library's, which the runner distribution shares and pins.

Read from the sources and ``pyproject.toml`` files, not from installed metadata, so the test
sees what a build would ship (an editable install's metadata can be stale).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

import everystep
import everystep_runner

ROOT = Path(__file__).resolve().parents[2]


def _pyproject(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _literal_version(module: Path) -> str:
    """The ``__version__ = "..."`` literal of ``module``, as setuptools reads it (no import)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            value = node.value
            assert isinstance(value, ast.Constant) and isinstance(value.value, str)
            return value.value
    raise AssertionError(f"no __version__ literal in {module}")


def test_library_version_is_read_from_the_package():
    """pyproject.toml takes the version from ``everystep.__version__``, a literal setuptools
    reads without importing the package (so a build never imports Django)."""
    project = _pyproject(ROOT / "pyproject.toml")
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "everystep.__version__"
    assert _literal_version(ROOT / "everystep" / "__init__.py") == everystep.__version__
    Version(everystep.__version__)  # a valid PEP 440 version


def test_runner_version_equals_the_library_version():
    """The runner distribution has its own ``__version__``, equal to the library's."""
    project = _pyproject(ROOT / "image" / "pyproject.toml")
    assert project["project"]["dynamic"] == ["version"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "everystep_runner.__version__"
    module = ROOT / "image" / "everystep_runner" / "__init__.py"
    assert _literal_version(module) == everystep_runner.__version__ == everystep.__version__


def test_runner_requires_exactly_this_library_version():
    """The runner depends on ``everystep==<the version>``: released together, never mixed."""
    project = _pyproject(ROOT / "image" / "pyproject.toml")
    requirements = [Requirement(r) for r in project["project"]["dependencies"]]
    library = [r for r in requirements if r.name == "everystep"]
    assert len(library) == 1
    assert str(library[0].specifier) == f"=={everystep.__version__}"


def test_runner_ships_the_same_license():
    """image/LICENSE, the runner distribution's, is the repository's LICENSE."""
    assert (ROOT / "image" / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    for path in (ROOT / "pyproject.toml", ROOT / "image" / "pyproject.toml"):
        assert _pyproject(path)["project"]["license"] == "MIT"


def test_quickstart_names_the_wheel_of_this_version():
    """The Quickstart's ``pip install dist/everystep-<version>-…whl`` names this version."""
    page = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    assert f"everystep-{everystep.__version__}-py3-none-any.whl" in page


def test_image_label_carries_the_library_version():
    """The runner image's OCI version label defaults to the library's version."""
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert f"ARG VERSION={everystep.__version__}\n" in dockerfile
