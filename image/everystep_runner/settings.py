"""The runner's settings: one name per setting across a TOML file, the environment and flags.

TOML key ``metrics_port`` ⇔ env ``EVERYSTEP_METRICS_PORT`` (or ``EVERYSTEP_METRICS_PORT_FILE``,
read from a file) ⇔ flag ``--metrics-port``. Precedence: flag > environment > TOML > default.
The worker options take their type, limits and help from ``everystep.options.OPTIONS`` and
have no runner default: one not given is not passed to the worker, which then uses the
project's Django setting, else its own default.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, PrivateAttr, SecretStr, ValidationError, ValidationInfo, create_model
from pydantic import field_validator as validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from everystep import cpus
from everystep.options import AUTO, OPTIONS, Option
from everystep_runner import dburl

ENV_PREFIX = "EVERYSTEP_"
CONFIG_ENV = "EVERYSTEP_CONFIG"
DEFAULT_CONFIG = Path("/etc/everystep/runner.toml")
BY_KEY: dict[str, Option] = {option.key: option for option in OPTIONS}
# The settings holding a database URL: validated by parsing, never echoed when they fail.
URLS = ("database_url", "listen_database_url")


class ConfigError(Exception):
    """The runner configuration is invalid; the message has one line per problem, naming the
    setting, where its value came from and what was expected."""


class _Settings(BaseSettings):
    """The runner's own settings; ``RunnerSettings`` adds the worker options to them."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="forbid", allow_inf_nan=False
    )

    project_dir: Path = Path("/app")
    settings_module: str | None = Field(default=None, pattern=r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
    database_url: SecretStr | None = None  # None: the project's own default database
    # PostgreSQL reached directly, for LISTEN only (behind a transaction-mode pooler).
    listen_database_url: SecretStr | None = None
    ui_bind: str = Field(default="0.0.0.0:8000", min_length=1)
    ui_workers: int = Field(default=2, ge=1)
    ui_timeout: int = Field(default=30, ge=1)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    log_format: Literal["text", "json"] = "text"

    _origins: dict[str, str] = PrivateAttr(default_factory=dict)
    _config: str | None = PrivateAttr(default=None)  # the TOML file considered, for describe()

    @validator("*", mode="before")
    @classmethod
    def _tidy(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name
        # pydantic takes True as 1; `pool = true` in a TOML file is a mistake, not a pool of 1.
        if isinstance(value, bool) and name in NUMBERS:
            raise ValueError("a boolean is not a number")
        if not isinstance(value, str):
            return value
        # An empty variable (EVERYSTEP_NAME= in a compose file) means "not set", as None does.
        if name in ("name", "settings_module", *URLS) and not value.strip():
            return None
        if name == "log_level":
            return value.strip().upper()
        return value.strip().lower() if name in ("log_format", *WORDS) else value

    @validator(*BY_KEY, check_fields=False)
    @classmethod
    def _within_limits(cls, value: Any, info: ValidationInfo) -> Any:
        # None is "not given": the worker will decide.
        return None if value is None else BY_KEY[str(info.field_name)].check(value)

    @validator(*URLS)
    @classmethod
    def _parseable_url(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is not None:
            parsed = dburl.parse(value.get_secret_value())  # its ValueError says what was expected
            if info.field_name == "listen_database_url" and "postgresql" not in parsed["ENGINE"]:
                raise ValueError("a postgres:// or postgresql:// URL (LISTEN is PostgreSQL's)")
        return value


def _field_type(option: Option) -> Any:
    """The option's type, with the word ``auto`` where it takes one, and None for unset."""
    return option.kind | Literal["auto"] | None if option.auto else option.kind | None


# mypy sees the runner's own fields; code reads the worker options through worker_options().
if TYPE_CHECKING:
    RunnerSettings = _Settings
else:
    RunnerSettings = create_model(
        "RunnerSettings",
        __base__=_Settings,
        __doc__="The effective runner configuration. Build it with ``load()``.",
        **{o.key: (_field_type(o), Field(default=None, description=o.help)) for o in OPTIONS},
    )

NAMES: tuple[str, ...] = (*BY_KEY, *_Settings.model_fields)
NUMBERS = {key for key, option in BY_KEY.items() if option.kind in (int, float)}
NUMBERS |= {"ui_workers", "ui_timeout"}
# Options that take the word auto (processes), in any case.
WORDS = {key for key, option in BY_KEY.items() if option.auto}
# What each setting accepts, in the words of the error messages and the flags' help.
EXPECTED: dict[str, str] = {
    **{key: option.expected() for key, option in BY_KEY.items()},
    "notify": "a boolean (true/false, yes/no, on/off, 1/0)",
    "project_dir": "a directory path",
    "settings_module": "a dotted Python module path (like mysite.settings)",
    "database_url": "a database URL",
    "listen_database_url": "a postgres:// URL that reaches PostgreSQL directly",
    "ui_bind": "an address to bind (like 0.0.0.0:8000)",
    "ui_workers": "an integer >= 1",
    "ui_timeout": "an integer number of seconds >= 1",
    "log_level": "one of DEBUG, INFO, WARNING, ERROR, CRITICAL",
    "log_format": "one of text, json",
}


class _Recorded(PydanticBaseSettingsSource):
    """A source that keeps the values it supplied, and labels their origin for the report."""

    def __init__(self, source: PydanticBaseSettingsSource, label: Callable[[str], str]) -> None:
        super().__init__(source.settings_cls)
        self.source, self.label = source, label
        self.values: dict[str, Any] = {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.source.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        self.values = self.source()
        return self.values


# EVERYSTEP_* variables that are no runner setting but are read by others: the demo's data
# directory (the image sets it). The test suite's EVERYSTEP_TEST_* are left out by prefix.
_OTHERS_VARIABLES = ("EVERYSTEP_DEMO_DATA",)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One line per ``EVERYSTEP_*`` variable that names no runner setting (nor a Django
    setting of everystep's, which a project's settings.py may take from the environment
    under its own name): the runner ignores it, and a misspelt TOML key is an error, so
    it is said, with the nearest setting's variable."""
    from everystep.conf import SETTING_NAMES

    runner = {_env(name) for name in NAMES}
    known = runner | {f"{var}_FILE" for var in runner} | {CONFIG_ENV, f"{CONFIG_ENV}_FILE"}
    known |= SETTING_NAMES | set(_OTHERS_VARIABLES)
    lines = []
    for var in sorted(environ):
        if not var.startswith(ENV_PREFIX) or var in known or var.startswith("EVERYSTEP_TEST_"):
            continue
        close = difflib.get_close_matches(var.removesuffix("_FILE"), sorted(runner), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"{var} is not a runner setting: ignored{hint}")
    return lines


def load(argv_flags: Mapping[str, Any] | None = None) -> RunnerSettings:
    """Build the runner settings, once, at start-up: from flags (setting name → value,
    ``config`` for the TOML path), the environment and the TOML file. ``ConfigError`` lists
    every invalid value with its setting, its source and what was expected."""
    flags = {key: value for key, value in (argv_flags or {}).items() if value is not None}
    config = flags.pop("config", None)
    unknown = [key for key in flags if key not in NAMES]
    problems = [f"{key}: not a runner setting (valid: {', '.join(NAMES)})" for key in unknown]
    files = _secret_files(os.environ, problems)
    toml, config_line = _toml(config, os.environ, problems)
    if problems:
        raise ConfigError("\n".join(problems))
    chain = (  # highest precedence first
        _Recorded(InitSettingsSource(RunnerSettings, flags), lambda name: _flag(name, flags[name])),
        _Recorded(EnvSettingsSource(RunnerSettings), lambda name: f"env {_env(name)}"),
        _Recorded(InitSettingsSource(RunnerSettings, files), _file_origin),
        _Recorded(toml, lambda name: f"toml {toml.toml_file_path}"),
    )
    try:  # _build_sources: BaseSettings' own way in for prepared sources; mypy sees fields only
        settings = RunnerSettings(_build_sources=(chain, {}))  # type: ignore[call-arg]
    except ValidationError as exc:
        raise ConfigError("\n".join(_problems(exc, chain))) from None
    # The chain lists the highest precedence first: reversed, it overwrites the others.
    settings._origins = {name: src.label(name) for src in reversed(chain) for name in src.values}
    settings._config = config_line
    return settings


def _secret_files(environ: Mapping[str, str], problems: list[str]) -> dict[str, str]:
    """``EVERYSTEP_<KEY>_FILE``: settings read from files, as Docker and Kubernetes mount
    secrets. Part of the environment layer: setting both variables of a setting is an error."""
    values: dict[str, str] = {}
    for name in NAMES:
        var = _env(name)
        if (path := environ.get(f"{var}_FILE")) is None:
            continue
        if var in environ:
            problems.append(f"{name}: both {var} and {var}_FILE are set; set only one")
            continue
        try:  # a secret file's trailing newline is not part of the secret
            values[name] = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{name}: cannot read {var}_FILE file {path!r}: {_reason(exc)}")
    return values


def _file_origin(name: str) -> str:
    return f"env {_env(name)}_FILE ({os.environ[_env(name) + '_FILE']})"


def _toml(
    flag: str | None, environ: Mapping[str, str], problems: list[str]
) -> tuple[TomlConfigSettingsSource, str]:
    """The TOML source, and a line saying which file was considered, why, and if it was read."""
    given = flag if flag is not None else environ.get(CONFIG_ENV) or None
    origin = "flag --config" if flag is not None else f"env {CONFIG_ENV}" if given else "default"
    path = DEFAULT_CONFIG if given is None else Path(given)
    # Only the image's default location may be absent: a path someone gave must exist (the
    # source skips, without a word, anything that is not a file).
    if given is None and not path.exists():
        return TomlConfigSettingsSource(RunnerSettings, None), f"{path}  (default; absent, skipped)"
    try:
        path.open("rb").close()
        toml = TomlConfigSettingsSource(RunnerSettings, path)
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {_reason(exc)} (from {origin})") from None
    except ValueError as exc:  # TOMLDecodeError, UnicodeDecodeError
        raise ConfigError(f"config: invalid TOML in {path}: {exc} (from {origin})") from None
    valid = f"valid keys: {', '.join(NAMES)}"
    unknown = [key for key in toml.toml_data if key not in NAMES]
    problems += [f"{key}: unknown key in toml {path} (from {origin}); {valid}" for key in unknown]
    return toml, f"{path}  ({origin}; read)"


def _problems(exc: ValidationError, chain: Sequence[_Recorded]) -> list[str]:
    problems: dict[str, str] = {}
    for error in exc.errors():
        name = str(error["loc"][0])
        expected = EXPECTED[name]
        if name in URLS and error["type"] == "value_error":
            expected = str(error["ctx"]["error"])  # the URL parser says what it expected
        # The value as its source gave it, before any validator tidied it.
        source = next((source for source in chain if name in source.values), None)
        shown = _shown(name, source.values[name] if source else error["input"])
        origin = source.label(name) if source else "default"
        problems.setdefault(name, f"{name}: expected {expected}, got {shown} (from {origin})")
    return [problems[name] for name in NAMES if name in problems]  # one line per setting


# What an error shows instead of a database URL that did not parse: such a value cannot be
# masked reliably (where its password starts is unknown), and it may be a secret's file.
HIDDEN_URL = "a value not shown here (it may hold a password)"


def _shown(name: str, value: Any, limit: int = 80) -> str:
    if name in URLS:
        return HIDDEN_URL
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _env(name: str) -> str:
    return f"{ENV_PREFIX}{name.upper()}"


def _flag(name: str, value: Any) -> str:
    return f"flag --{'no-' if value is False else ''}{name.replace('_', '-')}"


def sources(settings: RunnerSettings) -> dict[str, str]:
    """Where each setting's value came from: ``"flag --pool"``, ``"env EVERYSTEP_POOL"``,
    ``"env EVERYSTEP_X_FILE (/run/secrets/x)"``, ``"toml <path>"`` or ``"default"``."""
    return {name: settings._origins.get(name, "default") for name in NAMES}


def describe(settings: RunnerSettings) -> list[str]:
    """Lines for the config check: the TOML file considered, then ``name = value  (source)``
    for every setting, the database password masked; an unset worker option says what the
    worker will use instead."""
    lines = [f"config file: {settings._config}"] if settings._config else []
    for name, origin in sources(settings).items():
        value = getattr(settings, name)
        if value is None and name in BY_KEY:
            lines.append(f"{name} = (not set: {fallback(BY_KEY[name])})")
        elif name == "processes" and value == AUTO:
            lines.append(f"{name} = auto → {_auto_processes()}  ({origin})")
        else:
            lines.append(f"{name} = {_display(value)}  ({origin})")
    return lines


def _auto_processes() -> str:
    """What ``processes = auto`` starts here, and why: the worker resolves it alike (its
    ``WorkerOptions``), from the CPUs this container may use, not the host's cores."""
    cpu = cpus.available()
    return f"{cpu.count} process{'' if cpu.count == 1 else 'es'} ({cpu.source})"


def _display(value: Any) -> str:
    if value is None:
        return "(not set)"
    if isinstance(value, SecretStr):
        return dburl.mask_password(value.get_secret_value())
    return str(value).lower() if isinstance(value, bool) else str(value)


def fallback(option: Option) -> str:
    """What the worker uses for an option the runner was not given."""
    default = option.default_text or f"default {option.shown_default}"
    return f"Django setting {option.setting}, else {default}" if option.setting else default


def database_settings(url: str | SecretStr, name: str = "database_url") -> dict[str, Any]:
    """A Django ``DATABASES`` entry for a postgres(ql)://, mysql://, mariadb:// or
    sqlite:/// URL; ``ConfigError`` naming setting ``name`` for anything else."""
    raw = url.get_secret_value() if isinstance(url, SecretStr) else url
    try:
        return dburl.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}: expected {exc}, got {_shown(name, raw)}") from None


def worker_options(settings: RunnerSettings) -> dict[str, Any]:
    """Keyword arguments for ``everystep.worker.Worker``: only the options the runner was
    given, so that the project's Django settings, then the defaults, fill in the rest."""
    given = {option.name: getattr(settings, option.key) for option in OPTIONS}
    return {name: value for name, value in given.items() if value is not None}


def probe_address(settings: RunnerSettings) -> tuple[str, int] | None:
    """Where the runner's probes listen, in the worker and the ui role alike:
    ``metrics_bind`` (else its default) and ``metrics_port``; None when that port is off.
    Neither option has a Django setting, so the runner's value is the one in effect."""
    given = worker_options(settings)
    if not given.get("metrics_port"):
        return None
    bind = given.get("metrics_bind", BY_KEY["metrics_bind"].default)
    return str(bind), int(given["metrics_port"])


def worker_flags(settings: RunnerSettings) -> list[str]:
    """The given worker options as flags, which the runner and everystep_worker spell alike."""
    flags: list[str] = []
    for option in OPTIONS:
        value = getattr(settings, option.key)
        if isinstance(value, bool):
            flags.append(option.flag if value else f"--no-{option.flag[2:]}")
        elif value is not None:
            flags += [option.flag, str(value)]
    return flags
