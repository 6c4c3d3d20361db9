"""The ASGI project of ``bench/async_io.py``'s waiters phase, in one module: its settings
(``everystep_bench.settings`` plus the URLconf below, no middleware), its URLconf and its
application factory. Served by uvicorn as an ASGI deployment would be:

    DJANGO_SETTINGS_MODULE=everystep_bench.async_asgi \\
        python -m uvicorn --factory everystep_bench.async_asgi:application

- ``GET /wait/<run id>/`` awaits ``everystep.aresult(run id)`` and answers
  ``{"run": …, "result": …}`` once the run has ended (504 past ``?timeout=`` seconds,
  600 by default; 500 with the error's text if ``aresult`` raises);
- ``GET /waiting/`` answers how many waiters this process's hub holds and its reads so
  far (``everystep.waiting.waiters``): the benchmark fires its requests, then waits until
  every one is registered before it measures what the process holds.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.http import HttpRequest, JsonResponse
from django.urls import path

from everystep_bench.settings import *  # noqa: F403

ROOT_URLCONF = "everystep_bench.async_asgi"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
# The tests' session, auth and messages middleware are sync: each would cost every
# request a hop to Django's sync thread, which a view that only awaits does not need.
MIDDLEWARE: list[str] = []


async def wait_view(request: HttpRequest, run_id: UUID) -> JsonResponse:
    from everystep import aresult
    from everystep.errors import WaitTimeout

    timeout = float(request.GET.get("timeout", "600"))
    try:
        value = await aresult(run_id, timeout=timeout)
    except WaitTimeout as exc:
        return JsonResponse({"run": str(run_id), "error": str(exc)}, status=504)
    except Exception as exc:  # the benchmark reports it, with the run
        return JsonResponse({"run": str(run_id), "error": repr(exc)}, status=500)
    return JsonResponse({"run": str(run_id), "result": value})


async def waiting_view(request: HttpRequest) -> JsonResponse:
    from everystep.waiting.waiters import current_hub

    hub = current_hub()
    reads, ids_read = hub.counts()
    return JsonResponse(
        {
            "waiting": hub.waiting(),
            "reads": reads,
            "ids_read": ids_read,
            "listening": hub.listening,
        }
    )


urlpatterns = [
    path("wait/<uuid:run_id>/", wait_view),
    path("waiting/", waiting_view),
]


def application() -> Any:
    """uvicorn's ``--factory``: Django's ASGI handler, set up on these settings."""
    from django.core.asgi import get_asgi_application

    return get_asgi_application()
