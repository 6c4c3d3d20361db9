"""Which version of the project's code this process runs.

During a rolling deploy two versions of the code share one database. Each run records
the version that scheduled it, each step record the version that wrote it, and each
worker advertises its own: so a worker leaves a run of a workflow it does not have for a
worker that has it, and tells a record made by newer code (hand the run back) from one
its own code no longer makes (a broken replay: fail it).

The version is ``EVERYSTEP_CODE_VERSION`` (a Django setting, or the environment
variable: a git commit or image tag) when given; otherwise a digest of the project's
Python sources, so that two processes started from the same tree agree without being
told, and a process started after an edit does not.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from pathlib import Path

from django.conf import settings

SETTING = "EVERYSTEP_CODE_VERSION"
# Directories never read for the digest: caches, build outputs, virtualenvs, VCS data.
_SKIPPED = frozenset({"__pycache__", "node_modules", "site-packages", "build", "dist"})
# A tree larger than this is digested by its first files only (sorted by path): set the
# version explicitly for such a project.
MAX_FILES = 20_000
MAX_LENGTH = 64

_lock = threading.Lock()
_current: str | None = None


def current() -> str:
    """This process's code version, worked out once."""
    global _current
    if _current is None:
        with _lock:
            if _current is None:
                _current = _given() or _digest(project_root())
    return _current


def forget() -> None:
    """Work the version out again at the next ``current()`` (a setting changed)."""
    global _current
    with _lock:
        _current = None


def _given() -> str | None:
    value = getattr(settings, SETTING, None) or os.environ.get(SETTING) or None
    if value is None:
        return None
    return str(value).strip()[:MAX_LENGTH] or None


def project_root() -> Path | None:
    """The directory holding the settings module's top-level package (where
    ``manage.py`` usually lives); None if the settings were not loaded from a file."""
    module = sys.modules.get(os.environ.get("DJANGO_SETTINGS_MODULE", ""))
    path = getattr(module, "__file__", None)
    if not path:
        return None
    folder = Path(path).resolve().parent
    while (folder / "__init__.py").exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def _digest(root: Path | None) -> str:
    """``src-`` and the first 12 hex digits of a SHA-256 over every ``.py`` file under
    ``root`` (relative path and content)."""
    digest = hashlib.sha256()
    if root is None:
        return f"src-{digest.hexdigest()[:12]}"
    for path in _sources(root):
        try:
            content = path.read_bytes()
        except OSError:  # removed or unreadable meanwhile: what others also cannot read
            continue
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(content).digest())
    return f"src-{digest.hexdigest()[:12]}"


def source_dir(folder: Path) -> bool:
    """Whether the digest reads ``folder`` (a directory of the project's tree)."""
    return (
        not folder.name.startswith(".")
        and folder.name not in _SKIPPED
        and not (folder / "pyvenv.cfg").exists()
    )


def _sources(root: Path) -> list[Path]:
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(name for name in dirs if source_dir(Path(folder) / name))
        found.extend(Path(folder) / name for name in sorted(files) if name.endswith(".py"))
        if len(found) >= MAX_FILES:
            return found[:MAX_FILES]
    return found
