"""The values runs publish (``everystep.publish``), as the UI shows them: a run's page
lists them all, and the runs list shows one key as a column (``?show=stage``).

Values are shown in their stored form (as step results are: a datetime as its tagged
object), as compact JSON, and cut where they would crowd the page; the run page keeps
the whole of a cut value folded under it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from everystep import safe_text
from everystep.engine.core.pass_state import check_name
from everystep.engine.operations.progress import MAX_KEY_LENGTH
from everystep.errors import EverystepError
from everystep.models import FINAL_STATUSES, Workflow
from everystep.store import published

# Characters of a value in the run page's table; the whole value is folded under it.
VALUE_SHOWN = 300
# Characters of a value in the runs list's column: a cell, not a page.
CELL_SHOWN = 80


def compact(value: Any) -> str:
    """``value`` as one line of JSON, keys sorted (PostgreSQL's jsonb does not keep
    their order), printable whatever the row holds."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False, default=str)
    return safe_text.for_page(text)


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last of them an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_context(
    found: Workflow, pretty: Callable[[Any], str], refresh_href: str | None
) -> dict[str, Any]:
    """The run page's "Published" section: one row per key, in key order (none: no
    section), and, for a run not final whose page does not refresh itself, the link
    that turns the auto-refresh on (``refresh_href``; None: it is on)."""
    # Stored forms, as the page shows results: nothing a stored value names is imported.
    values = published.snapshot(found, decode=False) or {}
    rows = []
    for key, value in sorted(values.items()):
        text = compact(value)
        rows.append(
            {
                "key": safe_text.for_page(key),
                "value": cut(text, VALUE_SHOWN),
                # The whole value, pretty-printed (and cut far later), when the line is cut.
                "whole": pretty(value) if len(text) > VALUE_SHOWN else "",
            }
        )
    live = found.status not in FINAL_STATUSES
    return {
        "published": rows,
        "published_refresh_href": refresh_href if rows and live else None,
    }


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a published key (the rules of ``publish``), or None."""
    # The length first: the rules' messages quote the key, which is then short.
    if len(key) > MAX_KEY_LENGTH:
        return f"a key is at most {MAX_KEY_LENGTH} characters, this one {len(key):,}"
    try:
        check_name(key, "the key")
    except EverystepError as exc:
        return str(exc)
    return None


def column(runs: Iterable[Workflow], key: str) -> dict[UUID, str]:
    """Each run's value under ``key``, as the runs list's cell shows it (runs without
    one are left out): one read for the whole page."""
    values = published.column([run.id for run in runs], key, decode=False)
    return {run_id: cut(compact(value), CELL_SHOWN) for run_id, value in values.items()}
