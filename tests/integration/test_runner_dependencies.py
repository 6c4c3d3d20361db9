"""A project whose code needs packages the runner's environment lacks (issue 53): the
runner says in one line which module is missing and where the project's dependencies go
(an image derived FROM everystep-runner), not a traceback, and not "is the project
mounted?" when it is. tests/image/test_derived_image.py builds that image."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = """\
SECRET_KEY = "x"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "everystep"{apps}]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}}}}
USE_TZ = True
{imports}
"""
CASES = {
    # An installed app the environment lacks: django.setup() imports it.
    "installed-app": ({"apps": ', "rest_framework"', "imports": ""}, "rest_framework"),
    # A package the settings module imports.
    "settings-import": ({"apps": "", "imports": "import stripe"}, "stripe"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_missing_package_is_one_line_naming_it_and_the_derived_image(tmp_path: Path, case: str):
    fields, missing = CASES[case]
    (tmp_path / "depsite").mkdir()
    (tmp_path / "depsite" / "__init__.py").write_text("")
    (tmp_path / "depsite" / "settings.py").write_text(SETTINGS.format(**fields))
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVERYSTEP_")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env |= {"HOME": str(tmp_path), "DJANGO_SECRET_KEY": secrets.token_urlsafe(50)}
    done = subprocess.run(
        [sys.executable, "-m", "everystep_runner", "--project-dir", str(tmp_path),
         "--settings-module", "depsite.settings", "worker"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"imports {missing!r}, which is not installed in this image" in line
    assert "derived FROM everystep-runner" in line
    assert "docs/running/runner-image.md#a-project-with-dependencies" in line
    assert "is the project mounted" not in line
