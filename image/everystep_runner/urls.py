"""URLs served by the ``ui`` role: the everystep UI, the admin (for login), metrics and a
health endpoint for the image HEALTHCHECK."""

from __future__ import annotations

from django.apps import apps
from django.contrib.staticfiles.views import serve
from django.http import HttpRequest, HttpResponse
from django.urls import include, path, re_path

from everystep.metrics import metrics_view


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok\n", content_type="text/plain")


urlpatterns = [
    path("healthz", healthz),
    path("metrics", metrics_view),
    # The runner serves its own static files (admin CSS, the UI stylesheet): an ops UI
    # with a handful of users does not need a separate static server.
    re_path(r"^static/(?P<path>.*)$", serve, {"insecure": True}),
    path("", include("everystep.urls")),
]

if apps.is_installed("django.contrib.admin"):
    from django.contrib import admin

    urlpatterns.insert(0, path("admin/", admin.site.urls))
