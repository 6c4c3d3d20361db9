"""The runner's settings: sources, precedence, *_FILE secrets, errors, describe, database URLs."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from everystep_runner import settings as runner_settings
from everystep_runner.dburl import mask_password
from everystep_runner.settings import (
    NAMES,
    ConfigError,
    RunnerSettings,
    add_flags,
    database_settings,
    describe,
    flag_values,
    load,
    parse_flags,
    sources,
    worker_options,
)

# name, string value (flag/env/file), TOML literal, expected effective value
SAMPLES: list[tuple[str, str, str, Any]] = [
    ("pool", "8", "8", 8),
    ("poll", "0.5", "0.5", 0.5),
    ("name", "runner-1", '"runner-1"', "runner-1"),
    ("drain", "0", "0", 0.0),
    ("metrics_port", "9100", "9100", 9100),
    ("metrics_bind", "127.0.0.1", '"127.0.0.1"', "127.0.0.1"),
    ("notify", "false", "false", False),
    ("heartbeat", "2.5", "2.5", 2.5),
    ("orphan_timeout", "0", "0", 0.0),
    ("project_dir", "/srv/app", '"/srv/app"', Path("/srv/app")),
    ("settings_module", "mysite.settings", '"mysite.settings"', "mysite.settings"),
    ("database_url", "sqlite:///db.sqlite3", '"sqlite:///db.sqlite3"', "sqlite:///db.sqlite3"),
    ("ui_bind", "127.0.0.1:9000", '"127.0.0.1:9000"', "127.0.0.1:9000"),
    ("ui_workers", "4", "4", 4),
    ("ui_timeout", "60", "60", 60),
    ("log_level", "warning", '"Warning"', "WARNING"),  # case-insensitive
    ("log_format", "JSON", '"json"', "json"),
]
SAMPLE_IDS = [sample[0] for sample in SAMPLES]


@pytest.fixture(autouse=True)
def _no_default_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner.toml on the developer's machine must not leak into these tests."""
    monkeypatch.setattr(runner_settings, "DEFAULT_CONFIG", tmp_path / "absent" / "runner.toml")


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "runner.toml"
    path.write_text(text, encoding="utf-8")
    return path


def effective(settings: RunnerSettings, name: str) -> Any:
    value = getattr(settings, name)
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def config_error(**kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(**kwargs)
    return str(info.value)


# --- every setting from every source ------------------------------------------------


def test_samples_cover_every_setting() -> None:
    """The per-source tests below exercise every setting the runner has."""
    assert sorted(SAMPLE_IDS) == sorted(NAMES)


def test_defaults() -> None:
    """With no flag, no variable and no file, every setting has its documented default."""
    settings = load({}, {})
    assert settings.model_dump() == {
        "pool": 4,
        "poll": 0.2,
        "name": None,
        "drain": 30.0,
        "metrics_port": 0,
        "metrics_bind": "0.0.0.0",
        "notify": True,
        "heartbeat": 5.0,
        "orphan_timeout": 60.0,
        "project_dir": Path("/app"),
        "settings_module": None,
        "database_url": None,
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
    settings = load({"config": str(path)}, {})
    assert effective(settings, name) == expected
    assert sources(settings)[name] == f"toml {path}"


@pytest.mark.parametrize(("name", "raw", "literal", "expected"), SAMPLES, ids=SAMPLE_IDS)
def test_each_setting_from_env(name: str, raw: str, literal: str, expected: Any) -> None:
    """Every setting can be set by EVERYSTEP_<NAME>."""
    var = f"EVERYSTEP_{name.upper()}"
    settings = load({}, {var: raw})
    assert effective(settings, name) == expected
    assert sources(settings)[name] == f"env {var}"


@pytest.mark.parametrize(("name", "raw", "literal", "expected"), SAMPLES, ids=SAMPLE_IDS)
def test_each_setting_from_env_file(
    tmp_path: Path, name: str, raw: str, literal: str, expected: Any
) -> None:
    """Every setting can be read from the file named by EVERYSTEP_<NAME>_FILE."""
    secret = tmp_path / name
    secret.write_text(raw + "\n", encoding="utf-8")
    var = f"EVERYSTEP_{name.upper()}_FILE"
    settings = load({}, {var: str(secret)})
    assert effective(settings, name) == expected
    assert sources(settings)[name] == f"env {var} ({secret})"


@pytest.mark.parametrize(("name", "raw", "literal", "expected"), SAMPLES, ids=SAMPLE_IDS)
def test_each_setting_from_flag(name: str, raw: str, literal: str, expected: Any) -> None:
    """Every setting has a --flag, parsed as a string and validated by the model."""
    flag = f"--{name.replace('_', '-')}"
    args = ["--no-notify"] if name == "notify" else [flag, raw]
    flags, rest = parse_flags(args)
    assert rest == []
    settings = load(flags, {})
    assert effective(settings, name) == expected
    assert sources(settings)[name] == f"flag {flag}"


# --- precedence ---------------------------------------------------------------------


def test_flag_beats_env() -> None:
    """A flag overrides the environment variable of the same setting."""
    settings = load({"pool": "8"}, {"EVERYSTEP_POOL": "3"})
    assert settings.pool == 8
    assert sources(settings)["pool"] == "flag --pool"


def test_flag_beats_toml(tmp_path: Path) -> None:
    """A flag overrides the TOML key of the same setting."""
    path = write_toml(tmp_path, "pool = 3\n")
    settings = load({"pool": "8", "config": str(path)}, {})
    assert settings.pool == 8
    assert sources(settings)["pool"] == "flag --pool"


def test_env_beats_toml(tmp_path: Path) -> None:
    """An environment variable overrides the TOML key of the same setting."""
    path = write_toml(tmp_path, "drain = 5\n")
    settings = load({}, {"EVERYSTEP_DRAIN": "12", "EVERYSTEP_CONFIG": str(path)})
    assert settings.drain == 12.0
    assert sources(settings)["drain"] == "env EVERYSTEP_DRAIN"


def test_env_file_beats_toml(tmp_path: Path) -> None:
    """A *_FILE variable is part of the environment layer, above the TOML file."""
    path = write_toml(tmp_path, 'name = "from-toml"\n')
    secret = tmp_path / "name"
    secret.write_text("from-file\n", encoding="utf-8")
    env = {"EVERYSTEP_NAME_FILE": str(secret), "EVERYSTEP_CONFIG": str(path)}
    assert load({}, env).name == "from-file"


def test_toml_beats_default(tmp_path: Path) -> None:
    """A TOML key overrides the default, and settings it does not name keep theirs."""
    path = write_toml(tmp_path, "ui_workers = 6\n")
    settings = load({"config": str(path)}, {})
    assert (settings.ui_workers, settings.ui_timeout) == (6, 30)
    assert sources(settings)["ui_timeout"] == "default"


# --- which TOML file ----------------------------------------------------------------


def test_default_config_skipped_when_absent() -> None:
    """The image's default runner.toml is optional: without it the defaults apply."""
    settings = load({}, {})
    assert settings.pool == 4
    assert describe(settings)[0].endswith("(default; absent, skipped)")


def test_default_config_read_when_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default runner.toml is read when it exists."""
    path = write_toml(tmp_path, "pool = 7\n")
    monkeypatch.setattr(runner_settings, "DEFAULT_CONFIG", path)
    settings = load({}, {})
    assert settings.pool == 7
    assert describe(settings)[0] == f"config file: {path}  (default; read)"


def test_config_flag_beats_config_env(tmp_path: Path) -> None:
    """--config chooses the TOML file over EVERYSTEP_CONFIG."""
    path = write_toml(tmp_path, "pool = 7\n")
    settings = load({"config": str(path)}, {"EVERYSTEP_CONFIG": str(tmp_path / "missing.toml")})
    assert settings.pool == 7


def test_environ_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an explicit mapping, load() reads os.environ when called."""
    monkeypatch.setenv("EVERYSTEP_POOL", "9")
    assert load().pool == 9


def test_model_alone_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Constructing RunnerSettings directly never picks up EVERYSTEP_* variables."""
    monkeypatch.setenv("EVERYSTEP_POOL", "9")
    assert RunnerSettings().pool == 4


def test_unknown_everystep_variables_ignored() -> None:
    """Other tools' EVERYSTEP_* variables (tests, demo) are not runner settings and are ignored."""
    env = {"EVERYSTEP_TEST_DB": "postgres", "EVERYSTEP_DEMO_DATA": "/tmp/x", "EVERYSTEP_X": "1"}
    assert load({}, env) == load({}, {})


def test_empty_optional_variable_means_unset() -> None:
    """EVERYSTEP_NAME= (empty, as compose files write it) leaves the name to the hostname."""
    settings = load({}, {"EVERYSTEP_NAME": "", "EVERYSTEP_DATABASE_URL": " "})
    assert (settings.name, settings.database_url) == (None, None)


# --- *_FILE secrets -----------------------------------------------------------------


def test_env_file_strips_trailing_newline_only(tmp_path: Path) -> None:
    """A secret file's trailing newline (\\n or \\r\\n) is dropped; the rest is kept verbatim."""
    secret = tmp_path / "db"
    secret.write_bytes(b"postgres://u:p w @h/db\r\n")
    settings = load({}, {"EVERYSTEP_DATABASE_URL_FILE": str(secret)})
    assert settings.database_url is not None
    assert settings.database_url.get_secret_value() == "postgres://u:p w @h/db"
    assert sources(settings)["database_url"] == f"env EVERYSTEP_DATABASE_URL_FILE ({secret})"


def test_env_and_env_file_both_given(tmp_path: Path) -> None:
    """Setting both EVERYSTEP_X and EVERYSTEP_X_FILE is ambiguous and refused."""
    secret = tmp_path / "pool"
    secret.write_text("3", encoding="utf-8")
    message = config_error(environ={"EVERYSTEP_POOL": "2", "EVERYSTEP_POOL_FILE": str(secret)})
    assert message == "pool: both EVERYSTEP_POOL and EVERYSTEP_POOL_FILE are set; set only one"


def test_env_file_unreadable(tmp_path: Path) -> None:
    """A *_FILE naming a missing file fails, naming the variable and the path."""
    missing = tmp_path / "nope"
    message = config_error(environ={"EVERYSTEP_DATABASE_URL_FILE": str(missing)})
    assert message == (
        f"database_url: cannot read EVERYSTEP_DATABASE_URL_FILE file '{missing}': "
        "No such file or directory"
    )


def test_env_file_is_a_directory(tmp_path: Path) -> None:
    """A *_FILE naming a directory fails like any unreadable file."""
    message = config_error(environ={"EVERYSTEP_NAME_FILE": str(tmp_path)})
    assert message.startswith(f"name: cannot read EVERYSTEP_NAME_FILE file '{tmp_path}': ")


# --- bad values: one clear message naming setting, source and expectation --------------


def test_wrong_type() -> None:
    """A non-number where a number is expected names the setting, value and source."""
    message = config_error(environ={"EVERYSTEP_POOL": "eight"})
    assert message == "pool: expected an integer >= 1, got 'eight' (from env EVERYSTEP_POOL)"


def test_pool_below_one() -> None:
    """pool 0 is refused with the bound in the message."""
    message = config_error(environ={"EVERYSTEP_POOL": "0"})
    assert message == "pool: expected an integer >= 1, got '0' (from env EVERYSTEP_POOL)"


def test_negative_pool_from_flag() -> None:
    """A negative pool given as a flag names the flag as the source."""
    message = config_error(argv_flags={"pool": "-2"}, environ={})
    assert message == "pool: expected an integer >= 1, got '-2' (from flag --pool)"


def test_port_out_of_range(tmp_path: Path) -> None:
    """A metrics port above 65535 in the TOML file names the file."""
    path = write_toml(tmp_path, "metrics_port = 70000\n")
    message = config_error(argv_flags={"config": str(path)}, environ={})
    assert message == (
        "metrics_port: expected an integer port from 0 to 65535 (0 turns metrics off), "
        f"got 70000 (from toml {path})"
    )


def test_bad_log_level() -> None:
    """An unknown log level lists the valid ones."""
    message = config_error(environ={"EVERYSTEP_LOG_LEVEL": "verbose"})
    assert message == (
        "log_level: expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL, "
        "got 'verbose' (from env EVERYSTEP_LOG_LEVEL)"
    )


def test_bad_boolean() -> None:
    """notify accepts the usual boolean words and nothing else."""
    message = config_error(environ={"EVERYSTEP_NOTIFY": "maybe"})
    assert message.startswith("notify: expected a boolean")
    assert message.endswith("got 'maybe' (from env EVERYSTEP_NOTIFY)")


def test_toml_boolean_is_not_a_number(tmp_path: Path) -> None:
    """`pool = true` in TOML is refused rather than read as a pool of 1."""
    path = write_toml(tmp_path, "pool = true\n")
    message = config_error(argv_flags={"config": str(path)}, environ={})
    assert message == f"pool: expected an integer >= 1, got True (from toml {path})"


def test_infinite_drain_refused() -> None:
    """inf and nan are not durations."""
    message = config_error(environ={"EVERYSTEP_DRAIN": "inf"})
    assert message.startswith("drain: expected a number of seconds >= 0")


def test_several_problems_reported_together() -> None:
    """Every bad setting is reported at once, one line each, without a pydantic dump."""
    message = config_error(environ={"EVERYSTEP_POOL": "x", "EVERYSTEP_UI_WORKERS": "0"})
    lines = message.splitlines()
    assert [line.split(":")[0] for line in lines] == ["pool", "ui_workers"]
    assert "validation error" not in message
    assert "pydantic" not in message


def test_unknown_toml_key(tmp_path: Path) -> None:
    """A misspelt TOML key is an error naming the key, the file and the valid keys."""
    path = write_toml(tmp_path, "pol = 2\n")
    message = config_error(argv_flags={"config": str(path)}, environ={})
    assert message.startswith(f"pol: unknown key in toml {path} (from flag --config); valid keys:")
    assert "pool, poll, name, drain" in message


def test_missing_explicit_config(tmp_path: Path) -> None:
    """A config path someone gave must exist; the message says where the path came from."""
    missing = tmp_path / "missing.toml"
    message = config_error(environ={"EVERYSTEP_CONFIG": str(missing)})
    assert message == (
        f"config: cannot read {missing}: No such file or directory (from env EVERYSTEP_CONFIG)"
    )


def test_unreadable_explicit_config(tmp_path: Path) -> None:
    """A config path that cannot be read (here a directory) is an error."""
    message = config_error(argv_flags={"config": str(tmp_path)}, environ={})
    assert message.startswith(f"config: cannot read {tmp_path}: ")
    assert message.endswith("(from flag --config)")


def test_invalid_toml_syntax(tmp_path: Path) -> None:
    """A TOML syntax error names the file and the position."""
    path = write_toml(tmp_path, "pool = \n")
    message = config_error(argv_flags={"config": str(path)}, environ={})
    assert message.startswith(f"config: invalid TOML in {path}: ")
    assert "line 1" in message or "end of document" in message
    assert message.endswith("(from flag --config)")


def test_unknown_flag_key() -> None:
    """load() refuses a flag mapping key that is not a setting (a caller's mistake)."""
    message = config_error(argv_flags={"pools": "2"}, environ={})
    assert message.startswith("pools: not a runner setting")


# --- describe -----------------------------------------------------------------------


def test_describe_shows_values_and_sources_with_masked_password(tmp_path: Path) -> None:
    """The config check shows each value and its source, and never the database password."""
    path = write_toml(tmp_path, "ui_workers = 3\n")
    env = {"EVERYSTEP_DATABASE_URL": "postgres://app:s3cr%40t@db:5432/app"}
    lines = describe(load({"pool": "8", "config": str(path)}, env))
    assert "pool = 8  (flag --pool)" in lines
    assert f"ui_workers = 3  (toml {path})" in lines
    assert "poll = 0.2  (default)" in lines
    assert "name = (not set)  (default)" in lines
    assert "notify = true  (default)" in lines
    assert "database_url = postgres://app:***@db:5432/app  (env EVERYSTEP_DATABASE_URL)" in lines
    assert not any("s3cr" in line for line in lines)
    assert "s3cr" not in repr(load({}, env))


def test_bad_database_url_message_masks_password() -> None:
    """An unsupported database URL is reported without its password."""
    message = config_error(environ={"EVERYSTEP_DATABASE_URL": "redis://u:hunter2@h/0"})
    assert message == (
        "database_url: expected a URL whose scheme is one of postgres, postgresql, mysql, "
        "mariadb, sqlite, got 'redis://u:***@h/0' (from env EVERYSTEP_DATABASE_URL)"
    )


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


# --- worker options and flags ----------------------------------------------------------


def test_worker_options_match_worker_signature() -> None:
    """worker_options() gives keyword arguments Worker accepts, each mapped from its setting."""
    from everystep.worker import Worker

    env = {"EVERYSTEP_POOL": "8", "EVERYSTEP_NAME": "pod-0", "EVERYSTEP_NOTIFY": "no"}
    options = worker_options(load({"drain": "0", "metrics_port": "9100"}, env))
    inspect.signature(Worker).bind(**options)  # TypeError on a renamed or removed parameter
    assert options == {
        "pool_size": 8,
        "poll": 0.2,
        "name": "pod-0",
        "drain": 0.0,
        "metrics_port": 9100,
        "metrics_bind": "0.0.0.0",
        "notify": False,
        "heartbeat": 5.0,
        "orphan_timeout": 60.0,
    }


def test_parse_flags_leaves_other_arguments() -> None:
    """Runner flags are taken out; a command and its own options pass through in order."""
    flags, rest = parse_flags(["migrate", "--database", "other", "--pool", "3", "--notify"])
    assert flags == {"pool": "3", "notify": "true"}
    assert rest == ["migrate", "--database", "other"]


def test_parse_flags_missing_value() -> None:
    """A runner flag without its value is a ConfigError, not an argparse exit."""
    with pytest.raises(ConfigError, match="argument --pool: expected one argument"):
        parse_flags(["--pool"])


def test_add_flags_leaves_absent_flags_unset() -> None:
    """Flags not given are absent from the namespace, so they override nothing."""
    parser = argparse.ArgumentParser()
    add_flags(parser)
    namespace = parser.parse_args(["--config", "/x.toml", "--metrics-port", "9100"])
    assert flag_values(namespace) == {"config": "/x.toml", "metrics_port": "9100"}


def test_flag_values_skips_none() -> None:
    """A namespace from a parser with default=None (not SUPPRESS) still overrides nothing."""
    namespace = argparse.Namespace(pool=None, poll="1", verbosity=2)
    assert flag_values(namespace) == {"poll": "1"}
