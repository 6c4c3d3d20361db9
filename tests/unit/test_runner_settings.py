"""The runner's settings and argument splitting: sources, precedence, *_FILE secrets, errors,
the config report, database URLs, and the worker options passed on only when given."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import load_command_class
from pydantic import SecretStr

from everystep.options import BY_NAME, OPTIONS, Option
from everystep_runner import settings as runner_settings
from everystep_runner.cli import main, parser, split_argv
from everystep_runner.dburl import mask_password
from everystep_runner.settings import (
    NAMES,
    ConfigError,
    RunnerSettings,
    database_settings,
    describe,
    load,
    sources,
    worker_flags,
    worker_options,
)

# name, string value (flag/env/file), TOML literal, expected effective value
SAMPLES: list[tuple[str, str, str, Any]] = [
    ("pool", "8", "8", 8),
    ("processes", "Auto", '"AUTO"', "auto"),  # any case; a count is in the describe tests
    ("poll", "0.5", "0.5", 0.5),
    ("name", "runner-1", '"runner-1"', "runner-1"),
    ("drain", "0", "0", 0.0),
    ("metrics_port", "9100", "9100", 9100),
    ("metrics_bind", "127.0.0.1", '"127.0.0.1"', "127.0.0.1"),
    ("notify", "false", "false", False),
    ("heartbeat", "2.5", "2.5", 2.5),
    ("orphan_timeout", "0", "0", 0.0),
    ("liveness_timeout", "90", "90", 90.0),
    ("network_timeout", "15", "15", 15.0),
    ("reload", "true", "true", True),
    ("project_dir", "/srv/app", '"/srv/app"', Path("/srv/app")),
    ("settings_module", "mysite.settings", '"mysite.settings"', "mysite.settings"),
    ("database_url", "sqlite:///db.sqlite3", '"sqlite:///db.sqlite3"', "sqlite:///db.sqlite3"),
    (
        "listen_database_url",
        "postgres://pg:5432/app",
        '"postgres://pg:5432/app"',
        "postgres://pg:5432/app",
    ),
    ("ui_bind", "127.0.0.1:9000", '"127.0.0.1:9000"', "127.0.0.1:9000"),
    ("ui_workers", "4", "4", 4),
    ("ui_timeout", "60", "60", 60),
    ("log_level", "warning", '"Warning"', "WARNING"),  # case-insensitive
    ("log_format", "JSON", '"json"', "json"),
]
SAMPLE_IDS = [sample[0] for sample in SAMPLES]
EXAMPLE_TOML = Path(__file__).resolve().parents[2] / "config" / "runner.example.toml"
ROLES_WITHOUT_ARGUMENTS = ["worker", "ui", "demo", "config", "healthcheck"]


@pytest.fixture(autouse=True)
def _no_default_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner.toml on the developer's machine must not leak into these tests."""
    monkeypatch.setattr(runner_settings, "DEFAULT_CONFIG", tmp_path / "absent" / "runner.toml")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set environment variables for one test (the conftest strips every EVERYSTEP_*)."""

    def set_env(**variables: str) -> None:
        for name, value in variables.items():
            monkeypatch.setenv(name, value)

    return set_env


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "runner.toml"
    path.write_text(text, encoding="utf-8")
    return path


def effective(settings: RunnerSettings, name: str) -> Any:
    value = getattr(settings, name)
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def config_error(flags: dict[str, Any] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load(flags)
    return str(info.value)


# --- every setting from every source ------------------------------------------------


def test_samples_cover_every_setting() -> None:
    """The per-source tests below exercise every setting the runner has."""
    assert sorted(SAMPLE_IDS) == sorted(NAMES)


def test_every_worker_option_is_a_runner_setting() -> None:
    """Each declared worker option is a runner setting under its key (pool for pool_size)."""
    assert [name for name in NAMES if name in {o.key for o in OPTIONS}] == [o.key for o in OPTIONS]
    assert "pool" in NAMES and "pool_size" not in NAMES


def test_defaults() -> None:
    """With no flag, variable or file: the runner's own defaults, and no worker option at all."""
    settings = load()
    assert settings.model_dump() == {
        **{option.key: None for option in OPTIONS},
        "project_dir": Path("/app"),
        "settings_module": None,
        "database_url": None,
        "listen_database_url": None,
        "ui_bind": "0.0.0.0:8000",
        "ui_workers": 2,
        "ui_timeout": 30,
        "log_level": "INFO",
        "log_format": "text",
    }
    assert set(sources(settings).values()) == {"default"}


@pytest.mark.parametrize(("name", "raw", "literal", "expected"), SAMPLES, ids=SAMPLE_IDS)
def test_each_setting_from_toml(
    tmp_path: Path, name: str, raw: str, literal: str, expected: Any
) -> None:
    """Every setting can be set by its own key in the TOML file."""
    path = write_toml(tmp_path, f"{name} = {literal}\n")
    settings = load({"config": str(path)})
    assert effective(settings, name) == expected
    assert sources(settings)[name] == f"toml {path}"


@pytest.mark.parametrize(("name", "raw", "literal", "expected"), SAMPLES, ids=SAMPLE_IDS)
def test_each_setting_from_env(
    env: Callable[..., None], name: str, raw: str, literal: str, expected: Any
) -> None:
    """Every setting can be set by EVERYSTEP_<NAME>."""
    var = f"EVERYSTEP_{name.upper()}"
    env(**{var: raw})
    settings = load()
    assert effective(settings, name) == expected
    assert sources(settings)[name] == f"env {var}"


@pytest.mark.parametrize(("name", "raw", "literal", "expected"), SAMPLES, ids=SAMPLE_IDS)
def test_each_setting_from_env_file(
    tmp_path: Path, env: Callable[..., None], name: str, raw: str, literal: str, expected: Any
) -> None:
    """Every setting can be read from the file named by EVERYSTEP_<NAME>_FILE."""
    secret = tmp_path / name
    secret.write_text(raw + "\n", encoding="utf-8")
    var = f"EVERYSTEP_{name.upper()}_FILE"
    env(**{var: str(secret)})
    settings = load()
    assert effective(settings, name) == expected
    assert sources(settings)[name] == f"env {var} ({secret})"


@pytest.mark.parametrize(("name", "raw", "literal", "expected"), SAMPLES, ids=SAMPLE_IDS)
def test_each_setting_from_flag(name: str, raw: str, literal: str, expected: Any) -> None:
    """Every setting has a --flag (a switch: --x or --no-x), validated like any other source."""
    switch = isinstance(expected, bool)
    stem = name.replace("_", "-")
    flag = f"--{stem}" if expected is True else f"--no-{stem}" if switch else f"--{stem}"
    flags, command = split_argv([flag] if switch else [flag, raw])
    assert command == []
    settings = load(flags)
    assert effective(settings, name) == expected
    assert sources(settings)[name] == f"flag {flag}"


def test_example_toml_has_every_setting_with_its_default(tmp_path: Path) -> None:
    """config/runner.example.toml names every setting; uncommented, each shows its default."""
    text = EXAMPLE_TOML.read_text(encoding="utf-8")
    settings = load({"config": str(write_toml(tmp_path, re.sub(r"(?m)^# (\w+ = )", r"\1", text)))})
    assert {name for name, origin in sources(settings).items() if origin != "default"} == set(NAMES)
    for option in OPTIONS:
        if option.default is not None:
            assert settings.model_dump()[option.key] == option.default, option.key
    assert all(re.search(rf"(?m)^# {option.key} = ", text) for option in OPTIONS)  # unset


# --- precedence ---------------------------------------------------------------------


def test_flag_beats_env(env: Callable[..., None]) -> None:
    """A flag overrides the environment variable of the same setting."""
    env(EVERYSTEP_POOL="3")
    settings = load({"pool": "8"})
    assert settings.model_dump()["pool"] == 8
    assert sources(settings)["pool"] == "flag --pool"


def test_flag_beats_toml(tmp_path: Path) -> None:
    """A flag overrides the TOML key of the same setting."""
    path = write_toml(tmp_path, "ui_workers = 3\n")
    settings = load({"ui_workers": "8", "config": str(path)})
    assert settings.ui_workers == 8
    assert sources(settings)["ui_workers"] == "flag --ui-workers"


def test_env_beats_toml(tmp_path: Path, env: Callable[..., None]) -> None:
    """An environment variable overrides the TOML key of the same setting."""
    path = write_toml(tmp_path, "drain = 5\n")
    env(EVERYSTEP_DRAIN="12", EVERYSTEP_CONFIG=str(path))
    settings = load()
    assert worker_options(settings) == {"drain": 12.0}
    assert sources(settings)["drain"] == "env EVERYSTEP_DRAIN"


def test_env_file_beats_toml(tmp_path: Path, env: Callable[..., None]) -> None:
    """A *_FILE variable is part of the environment layer, above the TOML file."""
    path = write_toml(tmp_path, 'name = "from-toml"\n')
    secret = tmp_path / "name"
    secret.write_text("from-file\n", encoding="utf-8")
    env(EVERYSTEP_NAME_FILE=str(secret), EVERYSTEP_CONFIG=str(path))
    assert worker_options(load()) == {"name": "from-file"}


def test_toml_beats_default(tmp_path: Path) -> None:
    """A TOML key overrides the default, and settings it does not name keep theirs."""
    path = write_toml(tmp_path, "ui_workers = 6\n")
    settings = load({"config": str(path)})
    assert (settings.ui_workers, settings.ui_timeout) == (6, 30)
    assert sources(settings)["ui_timeout"] == "default"


def test_flag_given_as_none_overrides_nothing(env: Callable[..., None]) -> None:
    """A flag mapped to None (a parser default) is not given, so the environment still counts."""
    env(EVERYSTEP_POLL="1")
    assert worker_options(load({"pool": None})) == {"poll": 1.0}


# --- which TOML file ----------------------------------------------------------------


def test_default_config_skipped_when_absent() -> None:
    """The image's default runner.toml is optional: without it the defaults apply."""
    settings = load()
    assert settings.ui_workers == 2
    assert describe(settings)[0].endswith("(default; absent, skipped)")


def test_default_config_read_when_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default runner.toml is read when it exists."""
    path = write_toml(tmp_path, "pool = 7\n")
    monkeypatch.setattr(runner_settings, "DEFAULT_CONFIG", path)
    settings = load()
    assert worker_options(settings) == {"pool_size": 7}
    assert describe(settings)[0] == f"config file: {path}  (default; read)"


def test_config_flag_beats_config_env(tmp_path: Path, env: Callable[..., None]) -> None:
    """--config chooses the TOML file over EVERYSTEP_CONFIG."""
    path = write_toml(tmp_path, "ui_workers = 7\n")
    env(EVERYSTEP_CONFIG=str(tmp_path / "missing.toml"))
    assert load({"config": str(path)}).ui_workers == 7


def test_unknown_everystep_variables_ignored(env: Callable[..., None]) -> None:
    """Other tools' EVERYSTEP_* variables (tests, demo) are not runner settings and are ignored."""
    before = load()
    env(EVERYSTEP_TEST_DB="postgres", EVERYSTEP_DEMO_DATA="/tmp/x", EVERYSTEP_X="1")
    after = load()
    assert (after.model_dump(), sources(after)) == (before.model_dump(), sources(before))


def test_empty_optional_variable_means_unset(env: Callable[..., None]) -> None:
    """EVERYSTEP_NAME= (empty, as compose files write it) leaves the name to the worker."""
    env(EVERYSTEP_NAME="", EVERYSTEP_DATABASE_URL=" ", EVERYSTEP_SETTINGS_MODULE="")
    settings = load()
    assert (settings.database_url, settings.settings_module) == (None, None)
    assert worker_options(settings) == {}


# --- *_FILE secrets -----------------------------------------------------------------


def test_env_file_strips_trailing_newline_only(tmp_path: Path, env: Callable[..., None]) -> None:
    """A secret file's trailing newline (\\n or \\r\\n) is dropped; the rest is kept verbatim."""
    secret = tmp_path / "db"
    secret.write_bytes(b"postgres://u:p w @h/db\r\n")
    env(EVERYSTEP_DATABASE_URL_FILE=str(secret))
    settings = load()
    assert settings.database_url is not None
    assert settings.database_url.get_secret_value() == "postgres://u:p w @h/db"
    assert sources(settings)["database_url"] == f"env EVERYSTEP_DATABASE_URL_FILE ({secret})"


def test_env_and_env_file_both_given(tmp_path: Path, env: Callable[..., None]) -> None:
    """Setting both EVERYSTEP_X and EVERYSTEP_X_FILE is ambiguous and refused."""
    secret = tmp_path / "pool"
    secret.write_text("3", encoding="utf-8")
    env(EVERYSTEP_POOL="2", EVERYSTEP_POOL_FILE=str(secret))
    message = config_error()
    assert message == "pool: both EVERYSTEP_POOL and EVERYSTEP_POOL_FILE are set; set only one"


def test_env_file_unreadable(tmp_path: Path, env: Callable[..., None]) -> None:
    """A *_FILE naming a missing file fails, naming the variable and the path."""
    missing = tmp_path / "nope"
    env(EVERYSTEP_DATABASE_URL_FILE=str(missing))
    assert config_error() == (
        f"database_url: cannot read EVERYSTEP_DATABASE_URL_FILE file '{missing}': "
        "No such file or directory"
    )


def test_env_file_is_a_directory(tmp_path: Path, env: Callable[..., None]) -> None:
    """A *_FILE naming a directory fails like any unreadable file."""
    env(EVERYSTEP_NAME_FILE=str(tmp_path))
    assert config_error().startswith(f"name: cannot read EVERYSTEP_NAME_FILE file '{tmp_path}': ")


# --- bad values: one clear message naming setting, source and expectation --------------


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [("pool", "eight", "an integer >= 1"), ("processes", "many", "an integer >= 1, or auto")],
)
def test_wrong_type(env: Callable[..., None], name: str, value: str, expected: str) -> None:
    """A non-number where a number is expected names the setting, value and source."""
    var = f"EVERYSTEP_{name.upper()}"
    env(**{var: value})
    assert config_error() == f"{name}: expected {expected}, got {value!r} (from env {var})"


def test_pool_below_one(env: Callable[..., None]) -> None:
    """pool 0 is refused with the bound in the message."""
    env(EVERYSTEP_POOL="0")
    message = config_error()
    assert message == "pool: expected an integer >= 1, got '0' (from env EVERYSTEP_POOL)"


def test_negative_pool_from_flag() -> None:
    """A negative pool given as a flag names the flag as the source."""
    message = config_error({"pool": "-2"})
    assert message == "pool: expected an integer >= 1, got '-2' (from flag --pool)"


def test_port_out_of_range(tmp_path: Path) -> None:
    """A metrics port above 65535 in the TOML file names the file and the declared range."""
    path = write_toml(tmp_path, "metrics_port = 70000\n")
    message = config_error({"config": str(path)})
    assert message == (
        f"metrics_port: expected an integer from 0 to 65535, got 70000 (from toml {path})"
    )


def below_limit(option: Option) -> Any:
    assert option.minimum is not None
    if option.kind is str:
        return ""
    return option.kind(option.minimum if option.above else option.minimum - 1)


@pytest.mark.parametrize(
    "option",
    [option for option in OPTIONS if option.minimum is not None and option.kind is not str],
    ids=lambda option: option.key,
)
def test_worker_option_limits_come_from_options(tmp_path: Path, option: Option) -> None:
    """Each worker option refuses the value just below its declared minimum, in its words."""
    value = below_limit(option)
    path = write_toml(tmp_path, f"{option.key} = {value!r}\n")
    message = config_error({"config": str(path)})
    assert (
        message == f"{option.key}: expected {option.expected()}, got {value!r} (from toml {path})"
    )


def test_name_longer_than_declared_maximum() -> None:
    """A runner name longer than the declared maximum is refused before the worker starts."""
    message = config_error({"name": "x" * 256})
    assert message.startswith(f"name: expected {BY_NAME['name'].expected()}, got 'xxx")


def test_bad_log_level(env: Callable[..., None]) -> None:
    """An unknown log level lists the valid ones."""
    env(EVERYSTEP_LOG_LEVEL="verbose")
    assert config_error() == (
        "log_level: expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL, "
        "got 'verbose' (from env EVERYSTEP_LOG_LEVEL)"
    )


def test_bad_boolean(env: Callable[..., None]) -> None:
    """notify accepts the usual boolean words and nothing else."""
    env(EVERYSTEP_NOTIFY="maybe")
    message = config_error()
    assert message.startswith("notify: expected a boolean")
    assert message.endswith("got 'maybe' (from env EVERYSTEP_NOTIFY)")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("pool", "an integer >= 1"),
        ("processes", "an integer >= 1, or auto"),
        ("drain", "a number >= 0"),
        ("ui_workers", "an integer >= 1"),
    ],
)
def test_toml_boolean_is_not_a_number(tmp_path: Path, key: str, expected: str) -> None:
    """`pool = true` in TOML is refused rather than read as a pool of 1."""
    path = write_toml(tmp_path, f"{key} = true\n")
    message = config_error({"config": str(path)})
    assert message == f"{key}: expected {expected}, got True (from toml {path})"


def test_infinite_drain_refused(env: Callable[..., None]) -> None:
    """inf and nan are not durations."""
    env(EVERYSTEP_DRAIN="inf")
    assert config_error().startswith("drain: expected a number >= 0, got 'inf'")


def test_several_problems_reported_together(env: Callable[..., None]) -> None:
    """Every bad setting is reported at once, one line each, without a pydantic dump."""
    env(EVERYSTEP_POOL="x", EVERYSTEP_UI_WORKERS="0")
    message = config_error()
    assert [line.split(":")[0] for line in message.splitlines()] == ["pool", "ui_workers"]
    assert "validation error" not in message
    assert "pydantic" not in message


def test_cross_option_rule_left_to_the_worker() -> None:
    """orphan_timeout 5 loads: the heartbeat it must exceed may come from a Django setting."""
    assert worker_options(load({"orphan_timeout": "5"})) == {"orphan_timeout": 5.0}


def test_unknown_toml_key(tmp_path: Path) -> None:
    """A misspelt TOML key is an error naming the key, the file and the valid keys."""
    path = write_toml(tmp_path, "pol = 2\n")
    message = config_error({"config": str(path)})
    assert message.startswith(f"pol: unknown key in toml {path} (from flag --config); valid keys:")
    assert "pool, processes, poll, name, drain" in message


def test_missing_explicit_config(tmp_path: Path, env: Callable[..., None]) -> None:
    """A config path someone gave must exist; the message says where the path came from."""
    missing = tmp_path / "missing.toml"
    env(EVERYSTEP_CONFIG=str(missing))
    assert config_error() == (
        f"config: cannot read {missing}: No such file or directory (from env EVERYSTEP_CONFIG)"
    )


def test_unreadable_explicit_config(tmp_path: Path) -> None:
    """A config path that cannot be read (here a directory) is an error."""
    message = config_error({"config": str(tmp_path)})
    assert message.startswith(f"config: cannot read {tmp_path}: ")
    assert message.endswith("(from flag --config)")


def test_invalid_toml_syntax(tmp_path: Path) -> None:
    """A TOML syntax error names the file and the position."""
    path = write_toml(tmp_path, "pool = \n")
    message = config_error({"config": str(path)})
    assert message.startswith(f"config: invalid TOML in {path}: ")
    assert "line 1" in message or "end of document" in message
    assert message.endswith("(from flag --config)")


def test_unknown_flag_key() -> None:
    """load() refuses a flag mapping key that is not a setting (a caller's mistake)."""
    assert config_error({"pool_size": "2"}).startswith("pool_size: not a runner setting")


# --- describe: the config role ------------------------------------------------------


def test_describe_shows_values_and_sources_with_masked_password(
    tmp_path: Path, env: Callable[..., None]
) -> None:
    """The config check shows each value and its source, and never the database password."""
    path = write_toml(tmp_path, "ui_workers = 3\n")
    env(EVERYSTEP_DATABASE_URL="postgres://app:s3cr%40t@db:5432/app")
    lines = describe(load({"pool": "8", "notify": False, "config": str(path)}))
    assert "pool = 8  (flag --pool)" in lines
    assert "notify = false  (flag --no-notify)" in lines
    assert f"ui_workers = 3  (toml {path})" in lines
    assert "log_level = INFO  (default)" in lines
    assert "settings_module = (not set)  (default)" in lines
    assert "database_url = postgres://app:***@db:5432/app  (env EVERYSTEP_DATABASE_URL)" in lines
    assert not any("s3cr" in line for line in lines)
    assert "s3cr" not in repr(load())


def test_describe_says_what_the_worker_uses_for_unset_options() -> None:
    """An unset worker option shows its Django setting, then its default, not a runner value."""
    lines = describe(load())
    assert "heartbeat = (not set: Django setting EVERYSTEP_HEARTBEAT, else default 5)" in lines
    assert "notify = (not set: Django setting EVERYSTEP_NOTIFY, else default on)" in lines
    assert "pool = (not set: default 4)" in lines
    assert "processes = (not set: default 1)" in lines
    assert "name = (not set: the hostname)" in lines
    assert len([line for line in lines if "(not set: " in line]) == len(OPTIONS)


@pytest.mark.parametrize(
    ("literal", "shown"),
    [
        ("4", "processes = 4"),
        ('"auto"', "processes = auto → 2 processes (cgroup cpu.max 200000 100000)"),
    ],
    ids=["count", "auto"],
)
def test_describe_shows_the_processes_auto_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, literal: str, shown: str
) -> None:
    """processes = auto is shown with the count it stands for here, and where that came from."""
    from everystep import cpus

    found = cpus.Available(2, "cgroup cpu.max 200000 100000")
    monkeypatch.setattr(cpus, "available", lambda: found)
    path = write_toml(tmp_path, f"processes = {literal}\n")
    assert f"{shown}  (toml {path})" in describe(load({"config": str(path)}))


def test_config_role_prints_every_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`everystep-runner --heartbeat 2 config` prints each setting, then why the project fails."""
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)  # no project to load
    code = main(["--heartbeat", "2", "--project-dir", str(tmp_path), "config"])
    out = capsys.readouterr().out
    assert "heartbeat = 2.0  (flag --heartbeat)" in out.splitlines()
    assert "orphan_timeout = (not set: Django setting EVERYSTEP_ORPHAN_TIMEOUT" in out
    assert "project: NOT LOADABLE: no Django settings module" in out
    assert code == 1


def test_bad_database_url_message_masks_password(env: Callable[..., None]) -> None:
    """An unsupported database URL is reported without the URL (issue 21: never echoed)."""
    env(EVERYSTEP_DATABASE_URL="redis://u:hunter2@h/0")
    assert config_error() == (
        "database_url: expected a URL whose scheme is one of postgres, postgresql, mysql, "
        "mariadb, sqlite, got a value not shown here (it may hold a password) "
        "(from env EVERYSTEP_DATABASE_URL)"
    )


def test_a_listen_url_must_be_postgresql_and_is_never_echoed(env: Callable[..., None]) -> None:
    """LISTEN is PostgreSQL's: any other URL is refused, without the URL."""
    env(EVERYSTEP_LISTEN_DATABASE_URL="mysql://u:hunter2@h/db")
    assert config_error() == (
        "listen_database_url: expected a postgres:// or postgresql:// URL (LISTEN is "
        "PostgreSQL's), got a value not shown here (it may hold a password) "
        "(from env EVERYSTEP_LISTEN_DATABASE_URL)"
    )


def test_the_listen_urls_password_is_masked(env: Callable[..., None]) -> None:
    env(EVERYSTEP_LISTEN_DATABASE_URL="postgres://app:hunter2@pg:5432/app")
    lines = describe(load())
    assert (
        "listen_database_url = postgres://app:***@pg:5432/app  "
        "(env EVERYSTEP_LISTEN_DATABASE_URL)" in lines
    )
    assert not any("hunter2" in line for line in lines)


# --- database URLs ------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_postgres_url(scheme: str) -> None:
    """postgres:// and postgresql:// give the PostgreSQL backend, credentials decoded."""
    url = f"{scheme}://app%40corp:p%3Ass%2Fw@db.example:5433/orders?sslmode=require"
    assert database_settings(url) == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "orders",
        "USER": "app@corp",
        "PASSWORD": "p:ss/w",
        "HOST": "db.example",
        "PORT": "5433",
        "OPTIONS": {"sslmode": "require"},
    }


def test_postgres_socket_and_no_credentials() -> None:
    """A percent-encoded socket directory keeps its case; absent parts are empty strings."""
    assert database_settings("postgres://%2Fvar%2Frun%2FPG/app") == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "app",
        "USER": "",
        "PASSWORD": "",
        "HOST": "/var/run/PG",
        "PORT": "",
    }


def test_ipv6_host() -> None:
    """An IPv6 literal host is unbracketed and its port kept."""
    database = database_settings("postgresql://u@[::1]:5432/app")
    assert (database["HOST"], database["PORT"]) == ("::1", "5432")


@pytest.mark.parametrize("scheme", ["mysql", "mariadb"])
def test_mysql_url(scheme: str) -> None:
    """mysql:// and mariadb:// give the MySQL backend with utf8mb4 and integer options."""
    assert database_settings(f"{scheme}://root:pw@127.0.0.1:3306/shop?connect_timeout=5") == {
        "ENGINE": "django.db.backends.mysql",
        "NAME": "shop",
        "USER": "root",
        "PASSWORD": "pw",
        "HOST": "127.0.0.1",
        "PORT": "3306",
        "OPTIONS": {"charset": "utf8mb4", "connect_timeout": 5},
    }


def test_mysql_charset_override() -> None:
    """A charset in the query string replaces the utf8mb4 default."""
    assert database_settings("mysql://h/db?charset=utf8")["OPTIONS"] == {"charset": "utf8"}


SQLITE_OPTIONS = {
    "timeout": 30,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL;",
}


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("sqlite:////var/lib/everystep/db.sqlite3", "/var/lib/everystep/db.sqlite3"),
        ("sqlite:///data/db.sqlite3", "data/db.sqlite3"),
    ],
    ids=["absolute", "relative"],
)
def test_sqlite_url(url: str, name: str) -> None:
    """sqlite:////abs and sqlite:///rel give the SQLite backend with everystep's options."""
    assert database_settings(url) == {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": name,
        "OPTIONS": SQLITE_OPTIONS,
    }


def test_sqlite_query_overrides_options() -> None:
    """Query parameters override the SQLite defaults, digits becoming integers."""
    options = database_settings("sqlite:///db.sqlite3?timeout=5")["OPTIONS"]
    assert options == {**SQLITE_OPTIONS, "timeout": 5}


def test_database_settings_accepts_secret() -> None:
    """The settings' SecretStr can be passed as it is."""
    url = SecretStr("sqlite:///db.sqlite3")
    assert database_settings(url)["NAME"] == "db.sqlite3"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://u:pw@h/0", "a URL whose scheme is one of postgres, postgresql, mysql, "),
        ("db.sqlite3", "a URL whose scheme is one of "),
        ("postgres://u:pw@h:5432/", "a database name as the URL path"),
        ("postgres://u:pw@h:99999/db", "a port between 1 and 65535"),
        ("sqlite://host/db.sqlite3", "sqlite:////absolute/path or sqlite:///relative/path"),
        ("sqlite:///", "a database file path"),
    ],
    ids=["scheme", "no-scheme", "no-name", "port", "sqlite-host", "sqlite-no-path"],
)
def test_bad_database_url(url: str, expected: str) -> None:
    """A URL that is not a usable database is a ConfigError naming database_url, no password."""
    with pytest.raises(ConfigError) as info:
        database_settings(url)
    message = str(info.value)
    assert message.startswith(f"database_url: expected {expected}")
    assert "pw" not in message


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgres://u:pw@h/db", "postgres://u:***@h/db"),
        ("postgres://u@h/db", "postgres://u@h/db"),
        ("postgres://h/db", "postgres://h/db"),
        ("postgres://u:p/w@h/db", "postgres://u:***@h/db"),
    ],
    ids=["password", "user-only", "no-credentials", "raw-slash"],
)
def test_mask_password(url: str, masked: str) -> None:
    """Only the password is hidden, even one holding an unescaped slash."""
    assert mask_password(url) == masked


# --- worker options: only the given ones reach the worker ------------------------------


def test_worker_options_unset_by_default() -> None:
    """Without configuration the runner passes no worker option, so Django settings count."""
    settings = load()
    assert (worker_options(settings), worker_flags(settings)) == ({}, [])


def test_worker_options_are_the_given_ones_under_worker_names(env: Callable[..., None]) -> None:
    """worker_options() gives Worker keywords (pool → pool_size) for the given options only."""
    from everystep.worker import Worker

    env(EVERYSTEP_POOL="8", EVERYSTEP_NAME="pod-0", EVERYSTEP_NOTIFY="no")
    options = worker_options(load({"drain": "0", "metrics_port": "9100"}))
    inspect.signature(Worker).bind(**options)  # TypeError on a renamed or removed parameter
    assert options == {
        "pool_size": 8,
        "name": "pod-0",
        "drain": 0.0,
        "metrics_port": 9100,
        "notify": False,
    }


@pytest.mark.parametrize(
    ("given", "flags"),
    [
        ({"notify": True}, ["--notify"]),
        ({"notify": False}, ["--no-notify"]),
        ({"pool": "3", "heartbeat": "2"}, ["--pool", "3", "--heartbeat", "2.0"]),
        ({"liveness_timeout": "90", "ui_workers": "5"}, ["--liveness-timeout", "90.0"]),
        ({"processes": " AUTO"}, ["--processes", "auto"]),
        ({"processes": "4"}, ["--processes", "4"]),
    ],
    ids=[
        "notify",
        "no-notify",
        "pool-heartbeat",
        "liveness-only-worker-options",
        "processes-auto",
        "processes",
    ],
)
def test_worker_flags_are_the_given_options(given: dict[str, Any], flags: list[str]) -> None:
    """worker_flags() spells only the given worker options, booleans as --notify/--no-notify."""
    assert worker_flags(load(given)) == flags


def test_worker_flags_mean_the_same_to_everystep_worker() -> None:
    """Passed to `everystep_worker`, the runner's flags give Worker the same keywords."""
    given = {"pool": "3", "processes": "auto", "notify": False, "orphan_timeout": "30"}
    settings = load({**given, "name": "r-1"})
    command = load_command_class("everystep", "everystep_worker")
    parsed = vars(
        command.create_parser("manage.py", "everystep_worker").parse_args(worker_flags(settings))
    )
    given = {option.name: parsed[option.name] for option in OPTIONS}
    assert {name: value for name, value in given.items() if value is not None} == (
        worker_options(settings)
    )


def test_worker_flags_round_trip_through_the_runner() -> None:
    """The demo passes worker_flags() to a runner subprocess: they parse back to the same."""
    settings = load({"poll": "0.5", "notify": True, "metrics_bind": "127.0.0.1"})
    flags, command = split_argv([*worker_flags(settings), "worker"])
    assert command == ["worker"]
    assert worker_options(load(flags)) == worker_options(settings)


# --- splitting the command line -------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "flags", "command"),
    [
        ([], {}, []),
        (["--notify"], {"notify": True}, []),
        (["--no-notify", "config"], {"notify": False}, ["config"]),
        (["--pool=3"], {"pool": "3"}, []),
        (["--pool", "3", "worker"], {"pool": "3"}, ["worker"]),
        (
            ["--config", "/x.toml", "--metrics-port", "9100"],
            {"config": "/x.toml", "metrics_port": "9100"},
            [],
        ),
        (
            ["--pool", "3", "migrate", "--database", "default"],
            {"pool": "3"},
            ["migrate", "--database", "default"],
        ),
        (
            ["everystep_worker", "--pool", "8", "--no-notify"],
            {},
            ["everystep_worker", "--pool", "8", "--no-notify"],
        ),
        (["--log-level", "debug", "--", "shell"], {"log_level": "debug"}, ["shell"]),
    ],
    ids=[
        "nothing",
        "notify",
        "no-notify",
        "equals",
        "separate-value",
        "config",
        "command-own-database",
        "command-own-flags",
        "double-dash",
    ],
)
def test_split_argv(argv: list[str], flags: dict[str, Any], command: list[str]) -> None:
    """Runner flags before the first bare word are the runner's; the rest is the command's."""
    assert split_argv(argv) == (flags, command)


def test_no_abbreviated_runner_flags() -> None:
    """--database (a command's own option) before the command is not taken for --database-url."""
    with pytest.raises(ConfigError, match="unknown runner option '--database'"):
        split_argv(["--database", "default", "migrate"])


def _runner_flag_abbreviations() -> list[Any]:
    flags = [flag for flag in parser()._option_string_actions if flag.startswith("--")]
    # Each flag's longest proper prefix, where it names only that flag: what argparse
    # would otherwise take for it.
    return [
        pytest.param(flag[:-1], id=flag)
        for flag in flags
        if [other for other in flags if other.startswith(flag[:-1])] == [flag]
    ]


@pytest.mark.parametrize("prefix", _runner_flag_abbreviations())
def test_no_runner_flag_abbreviates(prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every runner flag cut short by one character (--poo 8 for --pool 8) exits 2
    naming it as an unknown runner option."""
    assert main([prefix, "8", "config"]) == 2
    assert f"unknown runner option {prefix!r}" in capsys.readouterr().err


def test_runner_flag_missing_its_value() -> None:
    """A runner flag without its value is a ConfigError, not an argparse exit."""
    with pytest.raises(ConfigError, match="argument --pool: expected one argument"):
        split_argv(["--pool"])


def test_unknown_runner_flag_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown flag before the role exits 2 with one line saying where flags go."""
    assert main(["--pools", "3", "config"]) == 2
    err = capsys.readouterr().err
    assert "unknown runner option '--pools'" in err
    assert "Traceback" not in err


def test_bad_value_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad runner setting exits 2 with the setting, its source and what is expected."""
    assert main(["--heartbeat", "0", "config"]) == 2
    err = capsys.readouterr().err
    assert (
        err.splitlines()[-1] == "heartbeat: expected a number > 0, got '0' (from flag --heartbeat)"
    )


def test_a_group_stopped_by_a_held_name_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The worker role exits 1, as for its own name held elsewhere (no configuration error,
    2), when one of its processes' names is held by another live worker."""
    from everystep import worker
    from everystep.worker.processes import GroupStopped
    from everystep_runner import cli

    class Held:
        def __init__(self, **options: Any) -> None:
            self.options = type("Options", (), {"reload": False})

        def run(self) -> bool:
            raise GroupStopped("runner-0/1 is held by pid 7 on host-a")

    monkeypatch.setattr(cli, "_setup", lambda settings, worker=False: None)
    monkeypatch.setattr(worker, "Worker", Held)
    assert main(["--processes", "2", "worker"]) == 1
    assert capsys.readouterr().err == "everystep-runner: runner-0/1 is held by pid 7 on host-a\n"


@pytest.mark.parametrize("role", ROLES_WITHOUT_ARGUMENTS)
def test_roles_reject_extra_arguments(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    """ui, demo, config, healthcheck and worker refuse arguments after the role, clearly."""
    assert main([role, "--pool", "3"]) == 2
    assert capsys.readouterr().err == (
        f"everystep-runner: the {role} role takes no arguments (got '--pool'); "
        "put runner options before the role\n"
    )


def test_help_lists_every_runner_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """--help shows every runner flag, --no-notify included, with the option's own help."""
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert f"--{name.replace('_', '-')}" in out
    assert "--no-notify" in out
    assert " ".join(BY_NAME["heartbeat"].help.split()[:3]) in " ".join(out.split())
    # Plain text for a terminal: no reStructuredText quoting from the docstring.
    assert "``" not in out and "Roles: worker (the default), ui, demo" in out


def test_an_everystep_variable_that_is_no_setting_is_named_with_the_nearest_one() -> None:
    """A misspelt TOML key is an error; a misspelt variable was ignored without a word. It
    is a warning line (a project's settings.py may read variables of its own under the
    prefix, so not an error), naming the setting it most likely meant."""
    from everystep_runner.settings import unknown_variables

    environ = {
        "EVERYSTEP_POLL_INTERVAL": "1",  # misspelt
        "EVERYSTEP_DRAN": "30",  # misspelt
        "EVERYSTEP_POOL": "4",  # a runner setting
        "EVERYSTEP_DATABASE_URL_FILE": "/run/secrets/url",  # its _FILE form
        "EVERYSTEP_MAX_RECOVERIES": "3",  # a Django setting a settings.py may read
        "EVERYSTEP_DEMO_DATA": "/tmp/demo",  # the image's own
        "EVERYSTEP_TEST_DB": "sqlite",  # the suite's
        "PATH": "/usr/bin",
    }
    assert unknown_variables(environ) == [
        "EVERYSTEP_DRAN is not a runner setting: ignored (did you mean EVERYSTEP_DRAIN?)",
        "EVERYSTEP_POLL_INTERVAL is not a runner setting: ignored (did you mean EVERYSTEP_POLL?)",
    ]


def test_the_cli_warns_of_an_unknown_variable_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EVERYSTEP_HEARTBEET", "2")
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)  # no project to load
    code = main(["--project-dir", str(tmp_path), "config"])
    err = capsys.readouterr().err
    assert "warning: EVERYSTEP_HEARTBEET is not a runner setting: ignored" in err
    assert "did you mean EVERYSTEP_HEARTBEAT?" in err
    assert code == 1  # the config role ran: no project in tmp_path
