"""Mount the UI with ``path("everystep/", include("everystep.urls"))``."""

from __future__ import annotations

from django.urls import path

from everystep.ui import actions, audit, bulk, views

app_name = "everystep"

urlpatterns = [
    path("", views.runs, name="runs"),
    path("runs/<uuid:run_id>/", views.run, name="run"),
    path("runs/<uuid:run_id>/action/", actions.run_action, name="run-action"),
    path("runs/bulk/", bulk.confirm, name="bulk"),
    path("runs/bulk/do/", bulk.perform, name="bulk-do"),
    path("runners/", views.runners, name="runners"),
    path("runners/requeue/", actions.runner_requeue, name="runner-requeue"),
    path("audit/", audit.entries, name="audit"),
]
