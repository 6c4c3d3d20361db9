"""Load the user's Django project at run time: the directory onto ``sys.path``, the
settings module, the runner's overrides, then ``django.setup()`` (during which everystep
imports the ``workflows`` module of every installed app, so each ``@workflow`` is
registered before the first claim).

The runner's log format and level hold over the project's ``LOGGING`` wherever Django
applies it: ``django.setup()`` applies it each time it runs, and a management command
run by the runner (``everystep_worker …``, the Kubernetes argument list) runs it again.
So the project's ``LOGGING_CONFIG`` is wrapped (``apply_logging``): the project's
configuration first, then the runner's for the ``everystep`` loggers.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from everystep_runner.settings import RunnerSettings, database_settings

_KEPT_FROM_PROJECT = ("CONN_MAX_AGE", "CONN_HEALTH_CHECKS", "ATOMIC_REQUESTS", "TIME_ZONE")
# The DATABASES alias listen_database_url becomes.
LISTEN_ALIAS = "everystep_listen"
# Where a project's third-party packages go: an image derived from the runner's.
DEPENDENCIES_DOC = "docs/running/runner-image.md#a-project-with-dependencies"
# What ``apply_logging`` applies: the runner's settings and the project's own
# LOGGING_CONFIG (a dotted path, or None when the project configures logging itself).
_LOGGING: dict[str, Any] = {}


class ProjectError(Exception):
    """The user's project cannot be loaded; the message says what to mount or set."""


def settings_module(settings: RunnerSettings, environ: Mapping[str, str]) -> str:
    module = settings.settings_module or environ.get("DJANGO_SETTINGS_MODULE")
    if not module:
        raise ProjectError(
            "no Django settings module: set EVERYSTEP_SETTINGS_MODULE (or "
            "DJANGO_SETTINGS_MODULE, or settings_module in the TOML), e.g. mysite.settings"
        )
    return module


def load(settings: RunnerSettings, environ: Mapping[str, str] | None = None) -> str:
    """Set Django up for the user's project; returns the settings module used."""
    environ = os.environ if environ is None else environ
    project_dir = settings.project_dir.resolve()
    if not project_dir.is_dir():
        raise ProjectError(
            f"project directory {project_dir} does not exist: mount your Django project "
            "there (docker run -v $PWD:/app …) or set EVERYSTEP_PROJECT_DIR"
        )
    module = settings_module(settings, environ)
    if str(project_dir) not in sys.path:
        sys.path.insert(0, str(project_dir))
    from django.core.exceptions import ImproperlyConfigured

    try:
        importlib.import_module(module)
    except ImportError as exc:
        # A module the settings import, not the settings module (or its package) itself:
        # the project is mounted, a package of its own is missing.
        missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
        if missing and not _names_part_of(module, missing):
            raise _not_installed(missing, f"settings module {module!r}") from None
        raise ProjectError(
            f"cannot import settings module {module!r} from {project_dir}: {exc} (is the "
            "project mounted at the project directory, and the module name right?)"
        ) from None
    except ImproperlyConfigured as exc:  # a settings module refusing its environment
        raise ProjectError(f"settings module {module!r}: {exc}") from None
    os.environ["DJANGO_SETTINGS_MODULE"] = module
    _apply_overrides(settings)
    _wrap_logging_config(settings)
    import django

    try:
        django.setup()
    except ModuleNotFoundError as exc:  # an INSTALLED_APPS entry, or a module one imports
        if not exc.name:
            raise
        raise _not_installed(
            exc.name, "the project (INSTALLED_APPS or the code it loads)"
        ) from None
    from django.apps import apps

    if not apps.is_installed("everystep"):
        raise ProjectError(f"'everystep' is not in INSTALLED_APPS of {module}: add it")
    # everystep's AppConfig.ready() has imported every app's workflows module by now.
    return module


def _names_part_of(module: str, missing: str) -> bool:
    """Whether ``missing`` is ``module`` itself or one of its packages."""
    return module == missing or module.startswith(missing + ".")


def _not_installed(missing: str, where: str) -> ProjectError:
    top = missing.split(".")[0]
    return ProjectError(
        f"{where} imports {missing!r}, which is not installed in this image. If it is a "
        f"package the project depends on (the distribution that provides {top!r}), "
        "install the project's requirements in an image derived FROM everystep-runner "
        f"({DEPENDENCIES_DOC}); if it is a module of the project, it is missing from the "
        "mount"
    )


def _apply_overrides(settings: RunnerSettings) -> None:
    # Settings are read lazily: changing DATABASES before django.setup() and before any
    # connection exists is enough for every part of Django to see the override.
    from django.conf import settings as django_settings

    if settings.database_url is not None:
        previous = django_settings.DATABASES.get("default", {})
        replacement = database_settings(settings.database_url)
        # The URL says where the database is; how the project uses connections stays.
        for key in _KEPT_FROM_PROJECT:
            if key in previous:
                replacement.setdefault(key, previous[key])
        django_settings.DATABASES["default"] = replacement
    if settings.listen_database_url is not None:
        # An alias of its own, which everystep uses for LISTEN and nothing else.
        listen = database_settings(settings.listen_database_url, "listen_database_url")
        django_settings.DATABASES[LISTEN_ALIAS] = listen
        django_settings.EVERYSTEP_LISTEN_DATABASE = LISTEN_ALIAS


def _wrap_logging_config(settings: RunnerSettings) -> None:
    from django.conf import settings as django_settings

    _LOGGING["runner"] = settings
    if "project" not in _LOGGING:  # load() twice (the demo): wrap the project's once
        _LOGGING["project"] = django_settings.LOGGING_CONFIG
    if _LOGGING["project"] is not None:
        django_settings.LOGGING_CONFIG = f"{__name__}.apply_logging"


def apply_logging(logging_settings: Any) -> None:
    """The ``LOGGING_CONFIG`` of a project the runner loaded: the project's own, then the
    runner's format and level for everystep's records (``configure_logging``)."""
    from django.utils.module_loading import import_string

    import_string(_LOGGING["project"])(logging_settings)
    configure_logging(_LOGGING["runner"])


def formatter(settings: RunnerSettings) -> logging.Formatter:
    """The runner's log format: ``log_format`` as a formatter."""
    from everystep.logs import JsonFormatter, TextFormatter

    # TextFormatter escapes line breaks and control characters in every record: a
    # workflow name or a message cannot write a line that passes for another record.
    return JsonFormatter() if settings.log_format == "json" else TextFormatter()


def configure_logging(settings: RunnerSettings) -> None:
    """everystep's own records to stdout in the runner's format and level, whatever the
    project's LOGGING says about the ``everystep`` loggers; it keeps everything else.
    Call it after ``django.setup()``, which applies that LOGGING."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter(settings))
    logger = logging.getLogger("everystep")
    logger.handlers[:] = [handler]
    logger.setLevel(settings.log_level)
    logger.propagate = False
    logger.disabled = False
    # A LOGGING that names a child (everystep.worker) would print its records a second
    # time, in its own format; disable_existing_loggers would have silenced the children
    # imported before it was applied. They all answer to the one logger above.
    for name, child in list(logging.root.manager.loggerDict.items()):
        if name.startswith("everystep.") and isinstance(child, logging.Logger):
            child.handlers.clear()
            child.setLevel(logging.NOTSET)
            child.propagate = True
            child.disabled = False
