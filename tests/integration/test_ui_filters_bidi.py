"""The runs list and the bulk confirm page show a URL filter's bidi controls escaped
(issue 50, item 6): ``show``, ``workflow``, ``runner``, ``queue``, ``q`` and ``parent``,
wherever the page reflects them (fields, column heading, filter list, notices)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import reverse

from tests.staff import staff_user

pytestmark = pytest.mark.django_db(transaction=True)

PARAMS = ("show", "workflow", "runner", "queue", "q", "parent")
# Every bidi control a page escapes: overrides, embeddings and isolates.
CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
VALUE = f"stage{CONTROLS}exe.txt"


def raw_controls(page: str) -> set[str]:
    return {char for char in CONTROLS if char in page}


@pytest.fixture
def operator(client: Client) -> Client:
    client.force_login(staff_user("cancel_workflow"))
    return client


@pytest.mark.parametrize("param", PARAMS)
def test_the_runs_list_shows_a_filters_bidi_controls_escaped(operator, param):
    """The runs list reflects the parameter with every bidi control written as \\u202e."""
    url = f"{reverse('everystep:runs')}?{urlencode({param: VALUE})}"
    response = operator.get(url)
    assert response.status_code == 200
    page = response.content.decode()
    assert raw_controls(page) == set()
    assert "\\u202e" in page and "\\u2066" in page


@pytest.mark.parametrize("param", PARAMS)
def test_the_bulk_confirm_page_shows_a_filters_bidi_controls_escaped(operator, param):
    """The bulk confirm page never shows the parameter's bidi controls as they are; the
    filters it lists (and the notices it gives) show them escaped."""
    query = urlencode({"action": "cancel", "status": "scheduled", param: VALUE})
    response = operator.get(f"{reverse('everystep:bulk')}?{query}")
    assert response.status_code == 200
    page = response.content.decode()
    assert raw_controls(page) == set()
    if param in ("workflow", "runner", "queue", "parent"):
        assert "\\u202e" in page
