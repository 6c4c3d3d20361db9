"""Serialization of values no database stores as they are: NUL, lone surrogates, deep
nesting (``everystep.serde``), no database."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from everystep import safe_text, serde, stored_errors
from everystep.errors import EverystepError, StepFailure

# Any code point, lone surrogates and NUL included.
ANY_TEXT = st.text(st.characters(codec=None, categories=None, exclude_categories=()))


def stored_json(value: Any) -> str:
    """The JSON text the database receives, as Django's JSONField writes it."""
    return json.dumps(serde.encode(value))


def strings_in(data: Any) -> list[str]:
    """Every string of decoded JSON data, dict keys included."""
    if isinstance(data, str):
        return [data]
    if isinstance(data, list):
        return [text for item in data for text in strings_in(item)]
    if isinstance(data, dict):
        return [text for key, item in data.items() for text in [key, *strings_in(item)]]
    return []


def assert_every_database_takes(raw: str) -> None:
    """No string of the stored JSON holds NUL (PostgreSQL's jsonb refuses it) or a lone
    surrogate (PostgreSQL, MariaDB and every driver refuse those)."""
    for text in strings_in(json.loads(raw)):
        assert "\x00" not in text
        text.encode("utf-8")  # strict: raises on a lone surrogate


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@given(ANY_TEXT)
def test_any_text_round_trips_and_is_storable(text: str) -> None:
    """Every Python string comes back as it was, through JSON text every database takes."""
    raw = stored_json({"value": text, "list": [text]})
    assert_every_database_takes(raw)
    assert serde.decode(json.loads(raw)) == {"value": text, "list": [text]}


@given(st.text(st.characters(codec="utf-8", exclude_characters="\x00")))
def test_ordinary_text_is_stored_as_it_is(text: str) -> None:
    """A string without NUL or lone surrogates is stored unchanged, backslashes and
    escape-like text included: existing rows and queries keep their meaning."""
    assert serde.encode(text) == text
    assert serde.encode("\\u0000" + text + "\\") == "\\u0000" + text + "\\"


@pytest.mark.parametrize(
    "value",
    [
        "a\x00b",
        "\x00",
        "\udcff",  # what os.fsdecode makes of the byte 0xff
        "\ud83d",
        "tab\\u0000 and \x00 and \\",
        {"key\x00": "v", "plain": "\x00", "__es__": 1},
        {"\udcff": [1, {"\x00": None}]},
        [dt.date(2024, 1, 2), "x\x00", b"\x00"],
    ],
    ids=[
        "nul-inside",
        "only-nul",
        "surrogate",
        "high-surrogate",
        "mixed",
        "keys",
        "deep-keys",
        "with-tags",
    ],
)
def test_unstorable_text_round_trips_through_a_str_tag(value: Any) -> None:
    """NUL and lone surrogates, in values and dict keys, come back exactly."""
    raw = stored_json(value)
    assert_every_database_takes(raw)
    assert serde.decode(json.loads(raw)) == value


def test_stored_form_of_a_nul_string_is_readable() -> None:
    """The escaped form spells the NUL out, so the UI and everystep_show show it."""
    assert serde.encode("a\x00b") == {"__es__": "str", "v": "a\\u0000b"}
    assert serde.encode({"k\x00": 1}) == {"__es__": "dict", "keys": "escaped", "v": {"k\\u0000": 1}}


@pytest.mark.parametrize("leaf", [1, "plain"])
def test_nesting_up_to_the_limit_is_accepted(leaf: Any) -> None:
    """MAX_DEPTH (31) levels of lists, the most MariaDB's JSON stores, are fine."""
    assert serde.roundtrip(nested(serde.MAX_DEPTH, leaf)) == nested(serde.MAX_DEPTH, leaf)


@pytest.mark.parametrize(
    "value",
    [
        nested(serde.MAX_DEPTH + 1),
        nested(serde.MAX_DEPTH, dt.date(2024, 1, 1)),  # the tag is one level more
        nested(serde.MAX_DEPTH - 1, dt.timedelta(1)),  # a tag holding a list: two more
        nested(serde.MAX_DEPTH, "\x00"),
        nested(serde.MAX_DEPTH - 1, {"__es__": 1}),  # a wrapped dict: two levels
        nested(5000),
    ],
    ids=["lists", "tagged-leaf", "timedelta", "escaped-str", "wrapped-dict", "very-deep"],
)
def test_nesting_beyond_the_limit_is_an_everystep_error(value: Any) -> None:
    """Deeper values are refused on every database, naming where, before anything is
    written (MariaDB would refuse them, the others would not)."""
    with pytest.raises(EverystepError, match=r"arguments\[0\]\[0\].*more than 31 levels"):
        serde.encode(value, "arguments")


def test_a_cycle_is_an_everystep_error() -> None:
    """A list that contains itself is refused, not a RecursionError."""
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(EverystepError, match="a cycle"):
        serde.encode(loop)


def test_error_with_nul_keeps_its_args_and_shows_its_message() -> None:
    """An exception's message is stored printable; its args round-trip exactly."""
    data = json.loads(json.dumps(stored_errors.encode_error(ValueError("bad\x00byte", "\udcff"))))
    assert_every_database_takes(json.dumps(data))
    assert data["message"] == "('bad\\x00byte', '\\udcff')"  # the tuple's repr
    rebuilt = stored_errors.decode_error(data)
    assert type(rebuilt) is ValueError and rebuilt.args == ("bad\x00byte", "\udcff")


def test_error_message_with_nul_is_printable() -> None:
    """A one-argument exception's message spells the NUL out."""
    assert stored_errors.encode_error(RuntimeError("a\x00b"))["message"] == "a\\u0000b"


def test_too_deep_exception_argument_is_stored_as_its_repr() -> None:
    """An exception argument nested too deeply for the error row is kept as its repr."""
    data = stored_errors.encode_error(ValueError(nested(serde.MAX_DEPTH)))
    assert data["args"] == [repr(nested(serde.MAX_DEPTH))]


@pytest.mark.parametrize(
    "exc, message",
    [
        (SystemExit(3), "builtins.SystemExit: 3"),
        (KeyboardInterrupt(), "builtins.KeyboardInterrupt"),
        (GeneratorExit("closing"), "builtins.GeneratorExit: closing"),
    ],
)
def test_base_exceptions_come_back_as_step_failure(exc: BaseException, message: str) -> None:
    """A recorded BaseException is never re-raised as itself: a StepFailure names it."""
    rebuilt = stored_errors.decode_error(stored_errors.encode_error(exc))
    assert isinstance(rebuilt, StepFailure)
    assert (str(rebuilt), rebuilt.original_type) == (message, serde.qualified_name(type(exc)))


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "ab\x00",
            "the filter contains \\\\u0000 at position 2: a NUL character, which "
            "PostgreSQL cannot store",
        ),
        ("\udcffx", "the filter contains \\\\udcff at position 0: a lone surrogate"),
    ],
)
def test_storable_text_names_the_problem_and_position(text: str, message: str) -> None:
    """Identifiers and filters are refused, not escaped, saying what and where."""
    with pytest.raises(EverystepError, match=message):
        safe_text.storable_text(text, "the filter")
    assert safe_text.storable_text("ordinary é ✓", "the filter") == "ordinary é ✓"


def test_printable_spells_out_what_cannot_be_stored() -> None:
    """Messages keep their other characters and spell NUL and surrogates out."""
    assert safe_text.printable("é\x00\udcff✓") == "é\\u0000\\udcff✓"
