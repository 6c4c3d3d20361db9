"""The allow-list of classes a stored value may name (``everystep.stored_types``): a row
naming a module imports nothing, ``__main__`` never resolves, an unknown enum is its
stored form and an unknown error a ``StepFailure``; registration and the scan of the
workflow and step functions' code allow the classes the code declares."""

from __future__ import annotations

import enum
import logging
import sys
from collections.abc import Iterator

import pytest

import everystep
from everystep import serde, stored_errors, stored_types
from everystep.errors import EverystepError, StepFailure
from tests.testapp import typed_workflows as typed

MARKER_MODULE = "tests.testapp.import_marker"


@pytest.fixture
def not_imported() -> Iterator[None]:
    """``tests.testapp.import_marker`` out of ``sys.modules`` for the test, as it was after."""
    saved = sys.modules.pop(MARKER_MODULE, None)
    package = sys.modules["tests.testapp"]
    attribute = vars(package).pop("import_marker", None)
    yield
    sys.modules.pop(MARKER_MODULE, None)
    if saved is not None:
        sys.modules[MARKER_MODULE] = saved
    if attribute is not None:
        package.import_marker = attribute  # type: ignore[attr-defined]


def forget(*classes: type) -> None:
    """Drop ``classes`` from the allow-list and forget every scan, as a fresh process."""
    for cls in classes:
        stored_types._known.pop(serde.qualified_name(cls), None)
    stored_types._scanned.clear()


@pytest.mark.usefixtures("not_imported")
def test_a_stored_enum_naming_a_module_not_imported_imports_nothing() -> None:
    """Decoding an enum tag naming a module not yet imported leaves it unimported and
    returns the stored tag as it is."""
    data = {"__es__": "enum", "cls": f"{MARKER_MODULE}.Tint", "name": "RED"}
    before = set(sys.modules)
    assert serde.decode({"colour": data}) == {"colour": data}
    assert MARKER_MODULE not in sys.modules
    assert set(sys.modules) - before == set()


@pytest.mark.usefixtures("not_imported")
def test_a_stored_error_naming_a_module_not_imported_imports_nothing() -> None:
    """Decoding an error whose type is in a module not imported imports nothing and
    gives a StepFailure carrying the type's name and the message."""
    path = f"{MARKER_MODULE}.Planted"
    before = set(sys.modules)
    got = stored_errors.decode_error({"type": path, "message": "planted", "args": ["planted"]})
    assert type(got) is StepFailure
    assert (got.original_type, str(got)) == (path, f"{path}: planted")
    assert set(sys.modules) - before == set()


@pytest.mark.parametrize(
    "path",
    ["unittest.__main__.Color", "__main__.Color", "__main__", "unittest.__main__"],
)
def test_a_path_with_a_main_part_never_resolves_nor_imports(path: str) -> None:
    """A stored name with a ``__main__`` part resolves to nothing and imports nothing."""
    had = "unittest.__main__" in sys.modules
    assert stored_types.resolve_enum(path) is None
    assert stored_types.resolve_error(path) is None
    data = {"__es__": "enum", "cls": path, "name": "RED"}
    assert serde.decode(data) == data
    assert type(stored_errors.decode_error({"type": path, "args": []})) is StepFailure
    assert ("unittest.__main__" in sys.modules) == had


class Hue(enum.Enum):
    """Moved into ``__main__`` by the test below."""

    RED = 1


def test_an_enum_of_main_is_refused_when_stored_and_never_resolves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An enum whose class lives in ``__main__`` is refused at the call, with advice,
    and its name does not resolve even though the class is there."""
    monkeypatch.setattr(Hue, "__module__", "__main__")
    monkeypatch.setattr(sys.modules["__main__"], "Hue", Hue, raising=False)
    with pytest.raises(EverystepError, match="not in __main__"):
        serde.encode(Hue.RED)
    assert stored_types.resolve_enum("__main__.Hue") is None


def test_an_encoded_enum_is_allowed_in_the_process_that_stored_it() -> None:
    """Storing a member allows its class: the same process rebuilds the member."""

    class Scoped(enum.Enum):
        A = 1

    assert serde.roundtrip(typed.Size.SMALL) is typed.Size.SMALL
    with pytest.raises(EverystepError, match="cannot be imported by that name"):
        serde.encode(Scoped.A)


class Registered(enum.Enum):
    """Named by no workflow and never stored: allowed only once registered."""

    ON = "on"


class RegisteredError(Exception):
    """Named by no workflow: rebuilt as itself only once registered."""


def test_register_type_allows_an_enum_and_an_exception_class() -> None:
    """``everystep.register_type`` returns the class and allows it to be rebuilt."""
    data = {"__es__": "enum", "cls": f"{__name__}.Registered", "name": "ON"}
    error = {"type": f"{__name__}.RegisteredError", "message": "x", "args": ["x"]}
    forget(Registered, RegisteredError)
    assert serde.decode(data) == data
    assert type(stored_errors.decode_error(error)) is StepFailure
    assert everystep.register_type(Registered) is Registered
    assert everystep.register_type(RegisteredError) is RegisteredError
    assert serde.decode(data) is Registered.ON
    assert type(stored_errors.decode_error(error)) is RegisteredError


def test_register_type_refuses_other_classes_and_local_ones() -> None:
    """Only an Enum or exception class findable by its name can be registered."""

    class Local(Exception):
        pass

    with pytest.raises(TypeError, match="Enum or exception"):
        everystep.register_type(int)
    with pytest.raises(TypeError, match="module level"):
        everystep.register_type(Local)


@pytest.mark.parametrize(
    "cls",
    [
        pytest.param(typed.Flavour, id="annotation"),
        pytest.param(typed.Size, id="named-in-a-step"),
        pytest.param(typed.Catalog.Missing, id="class-attribute"),
        pytest.param(typed.Refused, id="helper-function"),
        pytest.param(typed.CardDeclined, id="subclass-of-a-named-type"),
    ],
)
def test_the_scan_allows_the_classes_the_registered_code_names(cls: type) -> None:
    """A class the workflow and step code declares is rebuilt without being stored or
    registered first, found by scanning that code."""
    forget(cls)
    path = serde.qualified_name(cls)
    assert path not in stored_types._known
    found = (
        stored_types.resolve_enum(path)
        if issubclass(cls, enum.Enum)
        else stored_types.resolve_error(path)
    )
    assert found is cls


def test_the_scan_follows_a_module_attribute() -> None:
    """``json.JSONDecodeError`` in a step's body allows that class by its own name."""
    import json

    forget(json.JSONDecodeError)
    assert stored_types.resolve_error("json.decoder.JSONDecodeError") is json.JSONDecodeError


def test_the_scan_allows_nothing_the_code_does_not_name() -> None:
    """A class no registered code names, in a module already imported, stays unknown:
    naming ``Exception`` does not allow its subclasses."""
    forget(typed.Stray)
    assert stored_types.resolve_error(serde.qualified_name(typed.Stray)) is None


def test_an_unknown_name_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    """Decoding the same unknown type many times logs one warning."""
    data = {"__es__": "enum", "cls": "no_such_module_es.Once", "name": "A"}
    with caplog.at_level(logging.WARNING, logger="everystep.run"):
        for _ in range(3):
            serde.decode(data)
            stored_errors.decode_error({"type": "no_such_module_es.OnceError", "args": []})
    named = [r.getMessage() for r in caplog.records if "no_such_module_es.Once" in r.getMessage()]
    assert len(named) == 2
    assert all("register_type" in message for message in named)
