"""The project a uvicorn process serves in ``test_waiters_connections.py``, in one module:
its settings (``tests.settings`` plus the URLconf below), its URLconf and its views — the
two documented ways of waiting in an ASGI view, each touching the ORM first, as a view
that checks who may see a run does (docs/progress.md's stream, docs/async.md's view).

    DJANGO_SETTINGS_MODULE=tests.integration.waiting_site \\
        python -m uvicorn --factory django.core.asgi:get_asgi_application

- ``GET /stream/<run>/``: the run's published values as Server-Sent Events from
  ``awatch``, then an ``end`` event with its status;
- ``GET /result/<run>/``: ``aresult(run)``, answered as JSON.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from uuid import UUID

from django.http import Http404, HttpRequest, JsonResponse, StreamingHttpResponse
from django.urls import path

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "tests.integration.waiting_site"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
# Seconds: longer than any wait of the test or of bench/waiters_held.py (which serves these
# views too, from everystep_bench.waiting_asgi), so the wait never times out first.
WAIT_FOR = 600


async def _visible(run_id: UUID) -> None:
    """The ORM before the wait: the check a real view makes (here only that it exists)."""
    from everystep.models import Workflow

    if not await Workflow.objects.filter(id=run_id).aexists():
        raise Http404("no such run")


async def stream_view(request: HttpRequest, run_id: UUID) -> StreamingHttpResponse:
    import everystep
    from everystep.models import Workflow

    await _visible(run_id)

    async def events() -> AsyncIterator[str]:
        async for values in everystep.awatch(run_id, timeout=WAIT_FOR):
            yield f"data: {json.dumps(values)}\n\n"
        run = await Workflow.objects.aget(id=run_id)
        yield f"event: end\ndata: {json.dumps({'status': run.status})}\n\n"

    return StreamingHttpResponse(events(), content_type="text/event-stream")


async def result_view(request: HttpRequest, run_id: UUID) -> JsonResponse:
    import everystep

    await _visible(run_id)
    return JsonResponse({"result": await everystep.aresult(run_id, timeout=WAIT_FOR)})


urlpatterns = [
    path("stream/<uuid:run_id>/", stream_view),
    path("result/<uuid:run_id>/", result_view),
]
