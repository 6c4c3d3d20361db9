"""Step id allocation in a scope (``Scope.next_id``) and name validation, no database."""

from __future__ import annotations

import pytest

from everystep.engine.core.pass_state import MAX_STEP_ID_LENGTH, Scope, check_name
from everystep.errors import EverystepError

INVALID_NAMES = [
    pytest.param("a.b", id="dot"),
    pytest.param(".", id="only-dot"),
    pytest.param("send email", id="space"),
    pytest.param("send\temail", id="tab"),
    pytest.param("send\nemail", id="newline"),
    pytest.param(" lead", id="leading-space"),
    pytest.param("trail\n", id="trailing-newline"),
    pytest.param("a\u00a0b", id="non-breaking-space"),
    pytest.param("123", id="all-digits"),
    pytest.param("0", id="single-digit"),
    pytest.param("", id="empty"),
    pytest.param(None, id="none"),
    pytest.param(7, id="int"),
    pytest.param(b"name", id="bytes"),
    pytest.param(["a"], id="list"),
]


def test_positional_ids_count_from_one() -> None:
    """Unnamed calls get ids 1, 2, 3 in call order."""
    scope = Scope()
    assert [scope.next_id(None) for _ in range(3)] == ["1", "2", "3"]


def test_named_step_consumes_its_position() -> None:
    """A named step still takes a position, so later positional ids do not shift."""
    scope = Scope()
    assert scope.next_id(None) == "1"
    assert scope.next_id("charge") == "charge"
    assert scope.next_id(None) == "3"
    assert scope.next_id("email-1") == "email-1"
    assert scope.next_id(None) == "5"


def test_prefix_is_applied_to_positional_and_named_ids() -> None:
    """Ids in a branch scope carry its prefix: ``fan.1.`` + ``x`` and ``fan.1.`` + ``2``."""
    scope = Scope("fan.1.")
    assert scope.next_id("x") == "fan.1.x"
    assert scope.next_id(None) == "fan.1.2"


def test_default_scope_has_no_prefix() -> None:
    """The root scope's ids are bare."""
    assert Scope().next_id("root-step") == "root-step"


@pytest.mark.parametrize("name", ["a", "item-7", "x_y", "7a", "étape", "A" * 50])
def test_valid_names_are_accepted(name: str) -> None:
    """Non-empty names without dots or whitespace and not all digits are accepted."""
    check_name(name)
    assert Scope("2.0.").next_id(name) == f"2.0.{name}"


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_check_name_refuses_invalid_names(name: object) -> None:
    """Dots, whitespace, all digits, empty and non-strings are refused."""
    with pytest.raises(EverystepError):
        check_name(name)


@pytest.mark.parametrize("name", [p for p in INVALID_NAMES if p.values[0] is not None])
def test_next_id_refuses_invalid_names(name: object) -> None:
    """``next_id`` validates the name before handing out an id."""
    with pytest.raises(EverystepError):
        Scope().next_id(name)  # type: ignore[arg-type]


def test_duplicate_name_in_one_scope_is_refused() -> None:
    """The same name twice in one scope raises EverystepError naming it."""
    scope = Scope("fan.0.")
    scope.next_id("send")
    scope.next_id(None)
    with pytest.raises(EverystepError, match="send"):
        scope.next_id("send")


def test_same_name_in_different_scopes_is_fine() -> None:
    """Name uniqueness is per scope: two scopes can both use a name."""
    first, second = Scope("fan.0."), Scope("fan.1.")
    assert first.next_id("send") == "fan.0.send"
    assert second.next_id("send") == "fan.1.send"


def test_limit_is_three_hundred() -> None:
    """The documented whole-id limit is 300 characters."""
    assert MAX_STEP_ID_LENGTH == 300


def test_id_of_exactly_300_characters_is_accepted() -> None:
    """A whole id (prefix included) of exactly 300 characters is fine."""
    prefix = "fan.1."
    name = "n" * (300 - len(prefix))
    step_id = Scope(prefix).next_id(name)
    assert len(step_id) == 300
    assert step_id == prefix + name


def test_id_of_301_characters_is_refused() -> None:
    """A whole id of 301 characters raises, even though the name alone is shorter."""
    prefix = "fan.1."
    name = "n" * (301 - len(prefix))
    assert len(name) < 300
    with pytest.raises(EverystepError, match="301"):
        Scope(prefix).next_id(name)


def test_positional_id_over_limit_is_refused() -> None:
    """The limit applies to positional ids too: with a 298-char prefix, id 99 fits, 100 not."""
    scope = Scope("p" * 298)
    for _ in range(99):
        step_id = scope.next_id(None)
    assert len(step_id) == 300
    with pytest.raises(EverystepError):
        scope.next_id(None)
