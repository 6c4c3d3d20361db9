"""The runner's settings: one name per setting across a TOML file, the environment and flags.

TOML key ``metrics_port`` ⇔ env ``EVERYSTEP_METRICS_PORT`` (or ``EVERYSTEP_METRICS_PORT_FILE``,
read from a file) ⇔ flag ``--metrics-port``. Precedence: flag > environment > TOML > default.
``load()`` builds the settings once, at start-up; every invalid value is reported in one
``ConfigError`` naming the setting, where the value came from and what was expected.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

from pydantic import Field, PrivateAttr, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from everystep_runner import dburl

ENV_PREFIX = "EVERYSTEP_"
CONFIG_ENV = "EVERYSTEP_CONFIG"
DEFAULT_CONFIG = Path("/etc/everystep/runner.toml")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ConfigError(Exception):
    """The runner configuration is invalid; the message has one line per problem, naming the
    setting, where its value came from and what was expected."""

    def __init__(self, problems: str | Sequence[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class ConfigFile:
    """The TOML file considered: its path, how it was chosen, and whether it was read."""

    path: Path
    origin: str
    explicit: bool
    loaded: bool = False


class RunnerSettings(BaseSettings):
    """The effective runner configuration. Build it with ``load()``."""

    # Constructing the model reads nothing by itself (see settings_customise_sources):
    # load() gathers the sources so that it can tell where each value came from.
    model_config = SettingsConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    pool: int = Field(default=4, ge=1)
    poll: float = Field(default=0.2, gt=0)
    name: str | None = Field(default=None, min_length=1, max_length=255)  # None: the hostname
    drain: float = Field(default=30.0, ge=0)  # 0: wait for in-flight steps indefinitely
    metrics_port: int = Field(default=0, ge=0, le=65535)  # 0: no metrics endpoint
    metrics_bind: str = Field(default="0.0.0.0", min_length=1)
    notify: bool = True  # PostgreSQL LISTEN/NOTIFY
    heartbeat: float = Field(default=5.0, gt=0)
    orphan_timeout: float = Field(default=60.0, ge=0)  # 0: no orphan recovery
    project_dir: Path = Path("/app")
    settings_module: str | None = Field(default=None, pattern=r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
    database_url: SecretStr | None = None  # None: the project's own default database
    ui_bind: str = Field(default="0.0.0.0:8000", min_length=1)
    ui_workers: int = Field(default=2, ge=1)
    ui_timeout: int = Field(default=30, ge=1)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    log_format: Literal["text", "json"] = "text"

    _sources: dict[str, str] = PrivateAttr(default_factory=dict)
    _config: ConfigFile | None = PrivateAttr(default=None)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # pydantic-settings merges its sources without recording which one won, and the
        # config check must say that; so load() merges the layers and passes the result in.
        return (init_settings,)

    @field_validator("*", mode="before")
    @classmethod
    def _not_a_bool(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic takes True as 1; `pool = true` in a TOML file is a mistake, not a pool of 1.
        number = cls.model_fields[str(info.field_name)].annotation in (int, float)
        if number and isinstance(value, bool):
            raise ValueError(EXPECTED[str(info.field_name)])
        return value

    @field_validator("name", "settings_module", "database_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # An empty variable (EVERYSTEP_NAME= in a compose file) means "not set", as the
        # default None does, rather than an invalid empty name.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_case(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("log_format", mode="before")
    @classmethod
    def _lower_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("database_url")
    @classmethod
    def _parseable_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            dburl.parse(value.get_secret_value())  # its ValueError says what was expected
        return value


# What each setting accepts, in the words of the error messages and the flags' help.
EXPECTED: dict[str, str] = {
    "pool": "an integer >= 1",
    "poll": "a number of seconds > 0",
    "name": "a runner name of 1 to 255 characters",
    "drain": "a number of seconds >= 0 (0 waits indefinitely)",
    "metrics_port": "an integer port from 0 to 65535 (0 turns metrics off)",
    "metrics_bind": "an address to bind (like 0.0.0.0)",
    "notify": "a boolean (true/false, yes/no, on/off, 1/0)",
    "heartbeat": "a number of seconds > 0",
    "orphan_timeout": "a number of seconds >= 0 (0 turns orphan recovery off)",
    "project_dir": "a directory path",
    "settings_module": "a dotted Python module path (like mysite.settings)",
    "database_url": "a database URL",
    "ui_bind": "an address to bind (like 0.0.0.0:8000)",
    "ui_workers": "an integer >= 1",
    "ui_timeout": "an integer number of seconds >= 1",
    "log_level": f"one of {', '.join(LOG_LEVELS)}",
    "log_format": "one of text, json",
}
SECRETS = frozenset({"database_url"})
NAMES = tuple(RunnerSettings.model_fields)


@dataclass
class _Layer:
    """One source's values and, for each, the label the config check shows."""

    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, value: Any, origin: str) -> None:
        self.values[name] = value
        self.origins[name] = origin


def load(
    argv_flags: Mapping[str, str | None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> RunnerSettings:
    """Build the runner settings from flags (setting name → string, ``config`` for the TOML
    path), the environment (``os.environ`` when not given) and the TOML file."""
    flags = {key: value for key, value in (argv_flags or {}).items() if value is not None}
    env = os.environ if environ is None else environ
    problems: list[str] = []
    config = _config_file(flags, env)
    layers = [_flag_layer(flags, problems), _env_layer(env, problems)]
    toml_layer, config = _toml_layer(config, problems)
    if problems:
        raise ConfigError(problems)
    values, origins = _merge([*layers, toml_layer])
    settings = _validate(values, origins)
    settings._sources = {name: origins.get(name, "default") for name in NAMES}
    settings._config = config
    return settings


def _merge(layers: Sequence[_Layer]) -> tuple[dict[str, Any], dict[str, str]]:
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for layer in layers:  # highest precedence first: the first layer to set a name wins
        for name, value in layer.values.items():
            if name not in values:
                values[name] = value
                origins[name] = layer.origins[name]
    return values, origins


def _flag_layer(flags: Mapping[str, str], problems: list[str]) -> _Layer:
    layer = _Layer()
    for name, value in flags.items():
        if name == "config":
            continue
        if name in EXPECTED:
            layer.add(name, value, f"flag {_flag(name)}")
        else:
            problems.append(f"{name}: not a runner setting (valid: {', '.join(NAMES)})")
    return layer


def _env_layer(environ: Mapping[str, str], problems: list[str]) -> _Layer:
    # Only the settings' own variables are read: EVERYSTEP_TEST_DB, EVERYSTEP_DEMO_DATA
    # and other tools' variables share the prefix and must not be rejected.
    layer = _Layer()
    for name in NAMES:
        var = _env(name)
        file_var = f"{var}_FILE"
        if var in environ and file_var in environ:
            problems.append(f"{name}: both {var} and {file_var} are set; set only one")
        elif var in environ:
            layer.add(name, environ[var], f"env {var}")
        elif file_var in environ:
            path = environ[file_var]
            try:
                # Secret files (Docker, Kubernetes) usually end with a newline.
                value = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
            except (OSError, UnicodeDecodeError) as exc:
                problems.append(f"{name}: cannot read {file_var} file {path!r}: {_reason(exc)}")
            else:
                layer.add(name, value, f"env {file_var} ({path})")
    return layer


def _config_file(flags: Mapping[str, str], environ: Mapping[str, str]) -> ConfigFile:
    if "config" in flags:
        return ConfigFile(Path(flags["config"]), "flag --config", explicit=True)
    if CONFIG_ENV in environ:
        return ConfigFile(Path(environ[CONFIG_ENV]), f"env {CONFIG_ENV}", explicit=True)
    return ConfigFile(DEFAULT_CONFIG, "default", explicit=False)


def _toml_layer(config: ConfigFile, problems: list[str]) -> tuple[_Layer, ConfigFile]:
    layer = _Layer()
    where = f"(from {config.origin})"
    # Only the image's default location may be absent: a path someone gave must exist.
    if not config.explicit and not config.path.exists():
        return layer, config
    try:
        with config.path.open("rb") as file:
            data = tomllib.load(file)
    except OSError as exc:
        problems.append(f"config: cannot read {config.path}: {_reason(exc)} {where}")
        return layer, config
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        problems.append(f"config: invalid TOML in {config.path}: {exc} {where}")
        return layer, config
    for key, value in data.items():
        if key in EXPECTED:
            layer.add(key, value, f"toml {config.path}")
        else:
            problems.append(
                f"{key}: unknown key in toml {config.path} {where}; valid keys: {', '.join(NAMES)}"
            )
    return layer, ConfigFile(config.path, config.origin, config.explicit, loaded=True)


def _validate(values: dict[str, Any], origins: Mapping[str, str]) -> RunnerSettings:
    try:
        return RunnerSettings(**values)
    except ValidationError as exc:
        problems: dict[str, str] = {}
        for error in exc.errors():
            name = str(error["loc"][0]) if error["loc"] else "settings"
            if name in problems:  # one line per setting, even if several checks failed
                continue
            expected = EXPECTED.get(name, "a valid value")
            if error["type"] == "value_error":  # our own validators say what they expected
                expected = str(error["ctx"]["error"])
            shown = _shown(name, values.get(name, error["input"]))
            source = origins.get(name, "default")
            problems[name] = f"{name}: expected {expected}, got {shown} (from {source})"
        raise ConfigError(list(problems.values())) from None


def _shown(name: str, value: Any, limit: int = 80) -> str:
    if name in SECRETS and isinstance(value, str):
        value = dburl.mask_password(value)
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _env(name: str) -> str:
    return f"{ENV_PREFIX}{name.upper()}"


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def sources(settings: RunnerSettings) -> dict[str, str]:
    """Where each setting's effective value came from: ``"flag --pool"``, ``"env
    EVERYSTEP_POOL"``, ``"env EVERYSTEP_X_FILE (/run/secrets/x)"``, ``"toml <path>"`` or
    ``"default"``."""
    return {name: settings._sources.get(name, "default") for name in NAMES}


def describe(settings: RunnerSettings) -> list[str]:
    """Lines for the config check: the TOML file considered, then ``name = value  (source)``
    for every setting, with the database password masked."""
    config = settings._config
    lines = []
    if config is not None:
        state = "read" if config.loaded else "absent, skipped"
        lines.append(f"config file: {config.path}  ({config.origin}; {state})")
    origin = sources(settings)
    lines += [f"{name} = {_display(settings, name)}  ({origin[name]})" for name in NAMES]
    return lines


def _display(settings: RunnerSettings, name: str) -> str:
    value = getattr(settings, name)
    if value is None:
        return "(not set)"
    if isinstance(value, SecretStr):
        return dburl.mask_password(value.get_secret_value())
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def database_settings(url: str | SecretStr) -> dict[str, Any]:
    """A Django ``DATABASES["default"]`` dict for a postgres(ql)://, mysql://, mariadb:// or
    sqlite:/// URL; ``ConfigError`` naming ``database_url`` for anything else."""
    raw = url.get_secret_value() if isinstance(url, SecretStr) else url
    try:
        return dburl.parse(raw)
    except ValueError as exc:
        shown = _shown("database_url", raw)
        raise ConfigError(f"database_url: expected {exc}, got {shown}") from None


def worker_options(settings: RunnerSettings) -> dict[str, Any]:
    """Keyword arguments for ``everystep.worker.Worker``."""
    return {
        "pool_size": settings.pool,
        "poll": settings.poll,
        "name": settings.name,
        "drain": settings.drain,
        "metrics_port": settings.metrics_port,
        "metrics_bind": settings.metrics_bind,
        "notify": settings.notify,
        "heartbeat": settings.heartbeat,
        "orphan_timeout": settings.orphan_timeout,
    }


class _FlagParser(argparse.ArgumentParser):
    """Raises ``ConfigError`` instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"flags: {message}")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add the runner flags to ``parser``. A flag not given leaves its attribute unset, so
    it never overrides the environment or the TOML file; values stay strings for the model
    to validate, so every bad value gets the same kind of message whatever its source."""
    group = parser.add_argument_group("runner configuration")
    hidden = argparse.SUPPRESS
    group.add_argument(
        "--config", default=hidden, help=f"TOML file; env {CONFIG_ENV}; default {DEFAULT_CONFIG}"
    )
    # Two flags for one boolean setting, each storing the string the model would get from env.
    notify = (("--notify", "true", "on (default)"), ("--no-notify", "false", "off"))
    for flag, const, state in notify:
        help_text = f"PostgreSQL LISTEN/NOTIFY {state}; env EVERYSTEP_NOTIFY"
        group.add_argument(
            flag, dest="notify", action="store_const", const=const, default=hidden, help=help_text
        )
    for name in (name for name in NAMES if name != "notify"):
        default = RunnerSettings.model_fields[name].default
        help_text = f"{EXPECTED[name]}; env {_env(name)}"
        if default is not None:
            help_text += f"; default {default}"
        group.add_argument(_flag(name), dest=name, default=hidden, help=help_text)


def flag_values(namespace: argparse.Namespace) -> dict[str, str]:
    """The runner flags present in ``namespace`` (parsed with ``add_flags``), for ``load``."""
    return {
        name: value
        for name, value in vars(namespace).items()
        if (name in EXPECTED or name == "config") and value is not None
    }


def parse_flags(args: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Split ``args`` into the runner flags (for ``load``) and everything else, in order.
    A runner flag without its value is a ``ConfigError``."""
    # No abbreviations: a management command's own option such as migrate's --database
    # must pass through, not be taken as a prefix of --database-url.
    parser = _FlagParser(add_help=False, allow_abbrev=False)
    add_flags(parser)
    namespace, rest = parser.parse_known_args(list(args))
    return flag_values(namespace), rest
