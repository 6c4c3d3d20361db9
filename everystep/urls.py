"""Mount the read-only UI with ``path("everystep/", include("everystep.urls"))``."""

from __future__ import annotations

from django.urls import path

from everystep.ui import views

app_name = "everystep"

urlpatterns = [
    path("", views.runs, name="runs"),
    path("runs/<uuid:run_id>/", views.run, name="run"),
    path("runners/", views.runners, name="runners"),
]
