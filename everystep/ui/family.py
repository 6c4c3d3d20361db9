"""A run among the runs around it, on its page: the run whose body started it (its
parent) and the runs its own body started (its children, ``everystep.start``), the run
it was forked from and the runs forked from it (``everystep.fork``), and the
runs a composition step names in the step table: the child an ``everystep.start``
record started, the runs an ``everystep.result`` or ``everystep.gather`` record awaits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.http import QueryDict
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from everystep.engine.core import kinds
from everystep.models import StepStatus, Workflow
from everystep.store.lineage import run_lineage
from everystep.store.reports import run_family
from everystep.store.step_pages import StepOutline
from everystep.ui.filters import parse_run_id
from everystep.ui.run_table import count_label, run_rows

# Children listed on a run's page, the first started first; the runs list, filtered by
# parent, pages through all of them.
CHILDREN_SHOWN = 50
# Forks linked from a run's page, the first made first.
FORKS_SHOWN = 20
# Runs linked from one step's row; the step's JSON details list every one.
LINKED_SHOWN = 10


def family_context(found: Workflow, with_children: bool) -> dict[str, Any]:
    """The parent and the first children of run ``found``, for ``run.html``;
    ``with_children``: it may have children (see ``started_children``)."""
    family = run_family(found, CHILDREN_SHOWN, children=with_children)
    query = QueryDict(mutable=True)
    query["parent"] = str(found.id)
    count = family.child_count
    return {
        "parent": family.parent,
        "children": run_rows(family.children),
        "child_count": count_label(count),
        "child_runs": f"{count_label(count)} child run{'' if count == 1 else 's'}",
        "children_cut": count > len(family.children),
        "children_href": f"{reverse('everystep:runs')}?{query.urlencode()}",
        **fork_context(found),
    }


def fork_context(found: Workflow) -> dict[str, Any]:
    """The run ``found`` was forked from (and at which step) and the first runs forked
    from it, for ``run.html``."""
    lineage = run_lineage(found, FORKS_SHOWN)
    return {
        "forked_from": lineage.origin,
        # The step it executes from; None when the fork replays every copied record.
        "forked_from_step": found.forked_from_step,
        "forks": lineage.forks,
        "forks_more": lineage.more,
    }


def started_children(steps: Iterable[StepOutline], cut: bool) -> bool:
    """Whether a run whose steps are ``steps`` (the first ones only, if ``cut``) may
    have children: a body starts a child only through a recorded ``everystep.start``, so
    the run page of a run that never did reads nothing more for them."""
    return cut or any(step.name == kinds.START.record for step in steps)


def step_runs(name: str, status: str, args: Any, result: Any, href: Callable[[Any], str]) -> str:
    """The runs a composition step names, linked, for its row of the step table ("" for
    any other step): the child of a start, the runs a result or gather awaits."""
    if name == kinds.START.record:
        child = result.get("run") if isinstance(result, dict) else None
        return _links("child run", [child], href)
    if kinds.of(name).wake is kinds.Wake.RUNS and isinstance(args, list):
        # A wait records the ids it awaits as its arguments, whatever its outcome.
        verb = "awaits" if status == StepStatus.STARTED else "awaited"
        return _links(verb, args, href)
    return ""


def _links(label: str, values: list[Any], href: Callable[[Any], str]) -> str:
    # Stored JSON (a step settled by hand could hold anything): only run ids are linked.
    shown = values[:LINKED_SHOWN]
    ids = [run_id for value in shown if (run_id := parse_run_id(value)) is not None]
    if not ids:
        return ""
    links = format_html_join(", ", '<a class="es-id" href="{}">{}</a>', ((href(i), i) for i in ids))
    more = len(values) - LINKED_SHOWN
    return format_html(
        '<div class="es-runs">{} {}{}</div>', label, links, f" and {more} more" if more > 0 else ""
    )
