"""Tagged JSON serialization of values and exceptions (``everystep.serde``), no database."""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
import uuid
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from everystep import serde, stored_errors
from everystep.errors import EffectUncertain, EverystepError, StepFailure, Terminal

PARIS = ZoneInfo("Europe/Paris")


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class TwoArgError(Exception):
    """Its constructor needs two arguments but ``args`` only keeps the formatted message."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")


def stored(value: Any) -> Any:
    """What a replay reads back: encode, go through real JSON text, decode."""
    return serde.decode(json.loads(json.dumps(serde.encode(value))))


# (id, value, expected value after a round trip)
ROUND_TRIPS: list[tuple[str, Any, Any]] = [
    ("none", None, None),
    ("true", True, True),
    ("false", False, False),
    ("int", 42, 42),
    ("negative-int", -7, -7),
    ("big-int", 2**70, 2**70),
    ("float", 1.5, 1.5),
    ("whole-float", 2.0, 2.0),
    ("str", "héllo ✓", "héllo ✓"),
    ("empty-str", "", ""),
    ("list", [1, "a", None, 2.5], [1, "a", None, 2.5]),
    ("tuple", (1, 2, (3, 4)), [1, 2, [3, 4]]),
    ("empty-dict", {}, {}),
    (
        "nested-dict",
        {"a": {"b": [1, {"c": dt.date(2024, 2, 29)}]}, "d": {"e": None}},
        {"a": {"b": [1, {"c": dt.date(2024, 2, 29)}]}, "d": {"e": None}},
    ),
    (
        "dict-with-tag-key",
        {"__es__": "datetime", "v": "2024-01-01T00:00:00"},
        {"__es__": "datetime", "v": "2024-01-01T00:00:00"},
    ),
    (
        "nested-dict-with-tag-key",
        {"outer": {"__es__": "dict", "v": {"x": 1}}},
        {"outer": {"__es__": "dict", "v": {"x": 1}}},
    ),
    ("naive-datetime", dt.datetime(2024, 5, 6, 7, 8, 9, 123456), None),
    ("utc-datetime", dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC), None),
    ("paris-summer", dt.datetime(2024, 7, 14, 12, 0, tzinfo=PARIS), None),
    ("paris-winter", dt.datetime(2024, 1, 15, 23, 59, 59, 1, tzinfo=PARIS), None),
    (
        "fixed-offset",
        dt.datetime(2024, 1, 1, 8, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
        None,
    ),
    ("date", dt.date(1999, 12, 31), None),
    ("timedelta", dt.timedelta(days=3, hours=4, microseconds=5), None),
    ("negative-timedelta", dt.timedelta(days=-2, seconds=10, microseconds=7), None),
    ("minus-one-microsecond", -dt.timedelta(microseconds=1), None),
    ("uuid", uuid.UUID("12345678-1234-5678-1234-567812345678"), None),
    ("decimal", Decimal("12345678901234567890.000000001"), None),
    ("bytes", b"\x00\xff\x10binary", None),
    ("empty-bytes", b"", None),
    ("enum", Color.BLUE, None),
    ("int-enum", Priority.HIGH, None),
    ("enum-in-list", [Color.RED, Priority.LOW], None),
]


def _expected(value: Any, expected: Any) -> Any:
    return value if expected is None and value is not None else expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [pytest.param(v, e, id=i) for i, v, e in ROUND_TRIPS],
)
def test_decode_of_encode_rebuilds_value_and_type(value: Any, expected: Any) -> None:
    """Every supported value comes back equal and of the same type after JSON storage."""
    want = _expected(value, expected)
    got = stored(value)
    assert got == want
    assert type(got) is type(want)


@pytest.mark.parametrize(
    ("value", "expected"),
    [pytest.param(v, e, id=i) for i, v, e in ROUND_TRIPS],
)
def test_roundtrip_matches_what_storage_returns(value: Any, expected: Any) -> None:
    """``roundtrip`` returns exactly what a replay from stored JSON would return."""
    want = _expected(value, expected)
    got = serde.roundtrip(value)
    assert got == want
    assert type(got) is type(want)
    assert got == stored(value)


def test_tuple_comes_back_as_list_at_every_depth() -> None:
    """Tuples are stored as lists, including tuples nested in dicts and lists."""
    got = serde.roundtrip({"t": (1, (2,)), "l": [(3,)]})
    assert got == {"t": [1, [2]], "l": [[3]]}
    assert type(got["t"]) is list
    assert type(got["t"][1]) is list
    assert type(got["l"][0]) is list


def test_bool_is_not_turned_into_int() -> None:
    """``True``/``False`` stay bools, not 1/0."""
    got = serde.roundtrip([True, False, 1, 0])
    assert [type(item) for item in got] == [bool, bool, int, int]


def test_user_dict_with_tag_key_is_not_mistaken_for_a_tag() -> None:
    """A user dict shaped like a tagged value decodes to that dict, not the tagged type."""
    user = {"__es__": "uuid", "v": "12345678-1234-5678-1234-567812345678"}
    got = stored(user)
    assert got == user
    assert isinstance(got, dict)


def test_user_dict_with_tag_key_is_wrapped_in_storage() -> None:
    """A dict using the tag key is stored wrapped so its content stays plain data."""
    encoded = serde.encode({"__es__": "x", "n": 1})
    assert encoded == {"__es__": "dict", "v": {"__es__": "x", "n": 1}}


def test_plain_json_values_are_stored_as_they_are() -> None:
    """Plain JSON data is stored untagged."""
    value = {"a": [1, 2.5, "s", None, True], "b": {"c": []}}
    assert serde.encode(value) == value


def test_naive_datetime_stays_naive() -> None:
    """A naive datetime is rebuilt naive (no timezone invented)."""
    got = serde.roundtrip(dt.datetime(2024, 1, 1, 12, 0))
    assert got.tzinfo is None


def test_utc_datetime_keeps_utc_offset() -> None:
    """An aware UTC datetime is rebuilt aware with a zero offset."""
    value = dt.datetime(2024, 1, 1, 12, 0, tzinfo=dt.UTC)
    got = stored(value)
    assert got.tzinfo is not None
    assert got.utcoffset() == dt.timedelta(0)
    assert got == value


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(dt.datetime(2024, 7, 14, 12, 0, tzinfo=PARIS), id="summer"),
        pytest.param(dt.datetime(2024, 1, 14, 12, 0, tzinfo=PARIS), id="winter"),
        pytest.param(dt.datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=PARIS), id="ambiguous-fold"),
    ],
)
def test_zoneinfo_datetime_keeps_its_zone(value: dt.datetime) -> None:
    """A ZoneInfo datetime comes back in the same zone with the same wall time and offset."""
    got = stored(value)
    assert isinstance(got.tzinfo, ZoneInfo)
    assert got.tzinfo.key == "Europe/Paris"
    assert got.replace(tzinfo=None) == value.replace(tzinfo=None)
    assert got.utcoffset() == value.utcoffset()
    assert got.fold == value.fold


def test_decimal_keeps_its_exponent() -> None:
    """``Decimal("1.10")`` keeps its trailing zero (precision), not just its value."""
    got = stored(Decimal("1.10"))
    assert isinstance(got, Decimal)
    assert str(got) == "1.10"


def test_int_enum_is_the_member_not_the_int() -> None:
    """An IntEnum member comes back as the very member, not a plain int."""
    got = stored(Priority.HIGH)
    assert got is Priority.HIGH


def test_enum_is_stored_by_class_path_and_member_name() -> None:
    """An Enum member is stored as its class's module.qualname and its member name."""
    assert serde.encode(Color.RED) == {
        "__es__": "enum",
        "cls": f"{__name__}.Color",
        "name": "RED",
    }


class Shape(enum.Enum):
    SQUARE = (1, 2)


def test_enum_with_a_tuple_value_round_trips() -> None:
    """A member whose value is not JSON-native still comes back as the same member."""
    assert serde.roundtrip(Shape.SQUARE) is Shape.SQUARE


def test_local_enum_is_refused_when_stored() -> None:
    """An enum class that cannot be imported by name is refused before it is stored."""

    class Local(enum.Enum):
        A = 1

    with pytest.raises(EverystepError, match="cannot be imported"):
        serde.encode(Local.A)


def test_datetime_with_an_unnamed_zone_round_trips_as_an_offset() -> None:
    """A ZoneInfo without a key (built from a file) is stored as its UTC offset."""
    with open("/usr/share/zoneinfo/Europe/Paris", "rb") as handle:
        zone = ZoneInfo.from_file(handle)
    value = dt.datetime(2024, 1, 1, 12, tzinfo=zone)
    back = serde.roundtrip(value)
    assert back == value and back.utcoffset() == dt.timedelta(hours=1)


def test_everything_encodes_to_valid_json() -> None:
    """The encoded form of every supported type is accepted by ``json.dumps``."""
    value = {i: v for i, v, _ in ROUND_TRIPS}
    want = {i: _expected(v, e) for i, v, e in ROUND_TRIPS}
    text = json.dumps(serde.encode(value), allow_nan=False)
    assert serde.decode(json.loads(text)) == want


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        pytest.param({1, 2}, "builtins.set", id="set"),
        pytest.param(frozenset({1}), "builtins.frozenset", id="frozenset"),
        pytest.param(object(), "builtins.object", id="object"),
        pytest.param(len, "builtins.builtin_function_or_method", id="builtin-function"),
        pytest.param(lambda: None, "builtins.function", id="function"),
        pytest.param(1 + 2j, "builtins.complex", id="complex"),
        pytest.param(Color, "enum.EnumType", id="enum-class"),
    ],
)
def test_unsupported_type_names_type_and_lists_supported(value: Any, type_name: str) -> None:
    """An unsupported value raises EverystepError naming its type and the supported types."""
    with pytest.raises(EverystepError) as info:
        serde.encode(value)
    message = str(info.value)
    assert type_name in message
    assert "supported types" in message
    for supported in ("datetime", "timedelta", "UUID", "Decimal", "bytes", "Enum"):
        assert supported in message


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_float_is_refused(value: float) -> None:
    """NaN and infinities are refused with a message naming the float."""
    with pytest.raises(EverystepError) as info:
        serde.encode(value)
    assert "float" in str(info.value)
    assert repr(value) in str(info.value)


def test_non_str_dict_key_is_refused() -> None:
    """A dict with an int key is refused with a message naming the key type."""
    with pytest.raises(EverystepError) as info:
        serde.encode({1: "one"})
    assert "'int'" in str(info.value)
    assert "key" in str(info.value)


def test_error_path_points_into_nested_value() -> None:
    """The message locates the bad value inside lists and dicts: ``value[0]['x']``."""
    with pytest.raises(EverystepError) as info:
        serde.encode([{"x": {1, 2}}])
    assert "value[0]['x']" in str(info.value)


def test_error_path_for_nested_float_and_key() -> None:
    """Non-finite floats and bad keys deep inside a value are located too."""
    with pytest.raises(EverystepError) as info:
        serde.encode({"a": [1, 2, math.nan]})
    assert "value['a'][2]" in str(info.value)
    with pytest.raises(EverystepError) as info:
        serde.encode({"a": [{"b": {3: 4}}]})
    assert "value['a'][0]['b']" in str(info.value)


def test_error_path_uses_callers_root_name() -> None:
    """The ``where`` argument is the root of the path in the message."""
    with pytest.raises(EverystepError) as info:
        serde.encode([1, (2, object())], "arguments of step 3")
    assert "arguments of step 3[1][1]" in str(info.value)


def test_roundtrip_refuses_what_encode_refuses() -> None:
    """``roundtrip`` raises the same EverystepError as ``encode`` for unsupported data."""
    with pytest.raises(EverystepError, match=r"result\['k'\]"):
        serde.roundtrip({"k": {1}}, "result")


def test_unknown_tag_is_refused_on_decode() -> None:
    """Decoding a tag the library does not know raises EverystepError naming it."""
    with pytest.raises(EverystepError, match="nope"):
        serde.decode({"__es__": "nope", "v": 1})


def test_enum_class_that_is_not_allowed_comes_back_in_its_stored_form() -> None:
    """A stored enum whose class is not allowed here is the stored tagged dict as it is."""
    data = {"__es__": "enum", "cls": "no_such_module_es.Color", "name": "RED"}
    assert serde.decode(data) == data
    assert serde.decode([data]) == [data]


def test_enum_member_that_is_gone_comes_back_in_its_stored_form() -> None:
    """A stored member name the allowed class no longer has is its stored form too."""
    data = {"__es__": "enum", "cls": f"{__name__}.Color", "name": "PURPLE"}
    assert serde.decode(data) == data


# --- exceptions --------------------------------------------------------------------------


def test_encode_error_shape() -> None:
    """An exception is stored as ``{type: module.Qualname, message, args}``."""
    assert stored_errors.encode_error(ValueError("bad", 3)) == {
        "type": "builtins.ValueError",
        "message": "('bad', 3)",
        "args": ["bad", 3],
    }


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(ValueError("bad value", 3), id="ValueError"),
        pytest.param(KeyError("missing"), id="KeyError"),
        pytest.param(RuntimeError(), id="no-args"),
        pytest.param(ZeroDivisionError("division by zero"), id="ZeroDivisionError"),
        pytest.param(EverystepError("misuse"), id="EverystepError"),
    ],
)
def test_builtin_exception_round_trips(exc: Exception) -> None:
    """A builtin exception is rebuilt as the same type with the same args."""
    data = json.loads(json.dumps(stored_errors.encode_error(exc)))
    got = stored_errors.decode_error(data)
    assert type(got) is type(exc)
    assert got.args == exc.args
    assert str(got) == str(exc)


def test_exception_args_are_decoded_with_extended_types() -> None:
    """Exception args holding extended types come back as those types."""
    when = dt.date(2024, 1, 2)
    got = stored_errors.decode_error(stored_errors.encode_error(ValueError(when, Decimal("1.10"))))
    assert type(got) is ValueError
    assert got.args == (when, Decimal("1.10"))
    assert str(got.args[1]) == "1.10"


def test_terminal_keeps_reason_and_payload() -> None:
    """``Terminal(reason, payload)`` is rebuilt as Terminal with both reason and payload."""
    payload = {"order": 17, "when": dt.date(2024, 3, 1), "tags": ["a"]}
    data = json.loads(json.dumps(stored_errors.encode_error(Terminal("out of stock", payload))))
    got = stored_errors.decode_error(data)
    assert type(got) is Terminal
    assert got.reason == "out of stock"
    assert got.payload == payload
    assert str(got) == "out of stock"


def test_terminal_without_payload_round_trips() -> None:
    """``Terminal(reason)`` comes back with a None payload."""
    got = stored_errors.decode_error(stored_errors.encode_error(Terminal("stop")))
    assert isinstance(got, Terminal)
    assert got.reason == "stop"
    assert got.payload is None


def test_exception_that_cannot_be_rebuilt_falls_back_to_step_failure() -> None:
    """A type whose constructor rejects its stored args becomes StepFailure with the message."""
    data = stored_errors.encode_error(TwoArgError("E42", "disk full"))
    assert data["type"] == f"{__name__}.TwoArgError"
    got = stored_errors.decode_error(data)
    assert type(got) is StepFailure
    assert got.original_type == f"{__name__}.TwoArgError"
    assert "E42: disk full" in str(got)


@pytest.mark.parametrize(
    "type_path",
    [
        "no_such_module_es.Gone",
        "builtins.NoSuchErrorEs",
        "builtins.len",
        "Gone",
    ],
)
def test_unknown_exception_type_falls_back_to_step_failure(type_path: str) -> None:
    """A stored type that is gone or not an exception becomes StepFailure with the message."""
    got = stored_errors.decode_error(
        {"type": type_path, "message": "it broke", "args": ["it broke"]}
    )
    assert type(got) is StepFailure
    assert got.original_type == type_path
    assert "it broke" in str(got)


def test_unserializable_args_are_stored_as_repr() -> None:
    """An exception argument that cannot be serialized is stored as its repr()."""
    exc = ValueError({1, 2})
    data = stored_errors.encode_error(exc)
    assert data == {"type": "builtins.ValueError", "message": "{1, 2}", "args": ["{1, 2}"]}
    json.dumps(data)
    got = stored_errors.decode_error(data)
    assert type(got) is ValueError and got.args == ("{1, 2}",)


def test_terminal_with_an_unserializable_payload_stays_terminal() -> None:
    """A Terminal whose payload cannot be stored is still a Terminal on replay."""
    got = stored_errors.decode_error(stored_errors.encode_error(Terminal("stop", object())))
    assert type(got) is Terminal and got.reason == "stop"
    assert got.payload.startswith("<object object")


def test_step_failure_and_effect_uncertain_keep_their_fields() -> None:
    """StepFailure.original_type and EffectUncertain.step_id survive a round trip."""
    failure = stored_errors.decode_error(stored_errors.encode_error(StepFailure("gone", "x.Y")))
    assert type(failure) is StepFailure
    assert (str(failure), failure.original_type) == ("gone", "x.Y")
    uncertain = stored_errors.decode_error(
        stored_errors.encode_error(EffectUncertain("unsure", "fan.0.1"))
    )
    assert type(uncertain) is EffectUncertain
    assert (str(uncertain), uncertain.step_id) == ("unsure", "fan.0.1")


def test_encoded_error_is_valid_json() -> None:
    """The stored exception form is plain JSON even with extended-type args."""
    data = stored_errors.encode_error(Terminal("r", {"id": uuid.UUID(int=1), "b": b"\x01"}))
    text = json.dumps(data, allow_nan=False)
    got = stored_errors.decode_error(json.loads(text))
    assert isinstance(got, Terminal)
    assert got.payload == {"id": uuid.UUID(int=1), "b": b"\x01"}


@pytest.mark.parametrize("value", [1e16, 1.5e300, 1e-7, -0.0, -1e22])
def test_floats_jsonb_would_change_are_stored_tagged(value):
    """PostgreSQL's jsonb hands 1e+16 back as an int and -0.0 as 0: such floats are
    tagged, so a replay gives the body the very float the live pass saw."""
    stored = serde.encode(value)
    assert stored == {serde.TAG: "float", "v": repr(value)}
    back = serde.decode(json.loads(json.dumps(stored)))
    assert type(back) is float and repr(back) == repr(value)


@pytest.mark.parametrize("value", [0.1, 2.5, 123456.789, 0.0])
def test_other_floats_are_stored_as_they_are(value):
    assert serde.encode(value) == value


@pytest.mark.parametrize(
    "value",
    [
        dt.datetime(1, 1, 1, tzinfo=ZoneInfo("Africa/Addis_Ababa")),
        dt.datetime(9999, 12, 31, 23, tzinfo=ZoneInfo("America/New_York")),
        dt.datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York")),
    ],
)
def test_aware_datetimes_round_trip_to_the_ends_of_the_calendar_and_keep_their_fold(value):
    back = serde.roundtrip(value)
    assert back == value and repr(back) == repr(value)
    assert back.fold == value.fold
