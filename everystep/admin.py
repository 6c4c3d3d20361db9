"""Read-only admin for runs, their steps and the audit trail: everystep rows are written
by the engine and by explicit operator commands only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from everystep.models import AuditEntry, Step, Workflow


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StepInline(ReadOnlyMixin, admin.TabularInline):
    model = Step
    extra = 0
    fields = ("step_id", "name", "status", "started_at", "finished_at", "result", "error")
    readonly_fields = fields
    ordering = ("started_at",)


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("id", "name", "status", "claimed_by", "created_at", "completed_at")
    list_filter = ("status", "name")
    search_fields = ("=id", "name", "idempotency_key")
    readonly_fields = tuple(field.name for field in Workflow._meta.fields)
    inlines = (StepInline,)
    show_full_result_count = False  # COUNT(*) on millions of runs per page view is wasteful


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
