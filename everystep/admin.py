"""Read-only admin for runs, their steps and the audit trail: everystep rows are written
by the engine and by explicit operator commands only."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from everystep.models import AuditEntry, Step, Workflow
from everystep.safe_text import escape_controls


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# A run's page lists its first steps only, each value cut: an inline of every step made
# an 11 MB page of a 3,000-step run. The step list (filtered by the run) pages the rest.
STEPS_SHOWN = 50
VALUE_SHOWN = 200


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("id", "name", "status", "claimed_by", "created_at", "completed_at")
    list_filter = ("status", "name")
    search_fields = ("=id", "name", "idempotency_key")
    readonly_fields = (*(field.name for field in Workflow._meta.fields), "first_steps")
    show_full_result_count = False  # COUNT(*) on millions of runs per page view is wasteful

    @admin.display(description="steps")
    def first_steps(self, run: Workflow) -> str:
        rows = list(
            Step.objects.filter(workflow=run)
            .order_by("started_at", "id")
            .values_list("step_id", "name", "status", "result", "error")[: STEPS_SHOWN + 1]
        )
        every = reverse("admin:everystep_step_changelist") + "?" + urlencode({"q": str(run.pk)})
        more = (
            format_html(' <a href="{}">the first {}; every step of the run</a>', every, STEPS_SHOWN)
            if len(rows) > STEPS_SHOWN
            else ""
        )
        cells = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (step_id, name, status, _cut(error if error is not None else result))
                for step_id, name, status, result, error in rows[:STEPS_SHOWN]
            ),
        )
        return format_html("<table>{}</table>{}", cells, more) if rows else "none"


def _cut(value: Any) -> str:
    text = escape_controls(json.dumps(value, ensure_ascii=False, default=str))
    return text if len(text) <= VALUE_SHOWN else f"{text[:VALUE_SHOWN]}…"


@admin.register(Step)
class StepAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("workflow", "step_id", "name", "status", "started_at", "finished_at")
    list_filter = ("status",)
    search_fields = ("=workflow__id", "name")
    readonly_fields = tuple(field.name for field in Step._meta.fields)
    show_full_result_count = False


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("at", "actor", "via", "action", "run", "count")
    list_filter = ("action", "via")
    search_fields = ("=run__id", "actor")
    ordering = ("-id",)
    readonly_fields = tuple(field.name for field in AuditEntry._meta.fields)
    show_full_result_count = False
