"""The sdist and wheel of both distributions are what a user can trust: valid metadata,
the license, one version number."""

from __future__ import annotations

import sys
import tarfile
import zipfile
from email.parser import Parser

import pytest

import everystep
from tests.packaging.conftest import ROOT, Distribution, run

NAMES = ["everystep", "everystep_runner"]


def test_twine_check_strict_passes(distributions: dict[str, Distribution]):
    """``twine check --strict`` finds nothing to warn about in any built file."""
    files = [f for d in distributions.values() for f in (d.sdist, d.wheel)]
    done = run([sys.executable, "-m", "twine", "check", "--strict", *files], cwd=ROOT)
    assert done.stdout.count("PASSED") == len(files), done.stdout


@pytest.mark.parametrize("name", NAMES)
def test_license_is_in_the_sdist_and_the_wheel(name: str, distributions: dict[str, Distribution]):
    """The MIT LICENSE ships in both files of both distributions, word for word."""
    dist = distributions[name]
    license_text = (ROOT / "LICENSE").read_bytes()
    with tarfile.open(dist.sdist) as sdist:
        member = next(m for m in sdist.getmembers() if m.name.endswith("/LICENSE"))
        assert sdist.extractfile(member).read() == license_text  # type: ignore[union-attr]
    with zipfile.ZipFile(dist.wheel) as wheel:
        path = next(n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE"))
        assert wheel.read(path) == license_text


@pytest.mark.parametrize("name", NAMES)
def test_wheel_metadata(name: str, distributions: dict[str, Distribution]):
    """Each wheel carries the library's version, the MIT expression, a Markdown readme and
    the project URLs; the runner's pins the library to that same version."""
    with zipfile.ZipFile(distributions[name].wheel) as wheel:
        path = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(wheel.read(path).decode())
    assert metadata["Version"] == everystep.__version__
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert str(metadata.get_payload()).strip()
    urls = {url.split(",")[0] for url in metadata.get_all("Project-URL", [])}
    assert {"Homepage", "Documentation", "Source", "Changelog"} <= urls
    if name == "everystep_runner":
        assert f"everystep=={everystep.__version__}" in metadata.get_all("Requires-Dist", [])
    else:
        assert "Typing :: Typed" in metadata.get_all("Classifier", [])
