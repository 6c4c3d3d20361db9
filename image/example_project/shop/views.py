"""The catalogue import's pages: start an import, and follow it in a progress bar fed by
Server-Sent Events (docs/progress.md shows this file).

Served over ASGI (mysite/asgi.py), an open stream is a coroutine waiting in
``everystep.awatch``, not a thread; the watchers of one process share one wake-up. The
pages check the project's own permission: everystep's UI stays for staff."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from uuid import UUID

from django.core.exceptions import PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse

import everystep
from everystep.models import Workflow
from shop.workflows import IMPORT, import_catalogue

PERMISSION = "shop.import_catalogue"


async def check_access(request: HttpRequest, run_id: UUID | None = None) -> None:
    """403 unless the user holds the permission; 404 unless ``run_id`` is an import (the
    permission covers imports, not every run of the project)."""
    user = await request.auser()
    if not await user.ahas_perm(PERMISSION):
        raise PermissionDenied
    if run_id is not None and not await Workflow.objects.filter(id=run_id, name=IMPORT).aexists():
        raise Http404("no such import")


async def start_import(request: HttpRequest) -> HttpResponse:
    """GET: the form; POST: start an import and go to its page."""
    await check_access(request)
    if request.method == "POST":
        run = await everystep.aschedule(import_catalogue)
        return redirect("import-page", run_id=run.id)
    return TemplateResponse(request, "shop/import.html", {"run_id": None})


async def import_page(request: HttpRequest, run_id: UUID) -> HttpResponse:
    """The import's progress bar (the template's script opens ``import_events``)."""
    await check_access(request, run_id)
    return TemplateResponse(request, "shop/import.html", {"run_id": run_id})


async def import_events(request: HttpRequest, run_id: UUID) -> StreamingHttpResponse:
    """The run's published values as Server-Sent Events: a ``data:`` event at once and one
    per change, an ``end`` event with the run's status once it is final, then the end of
    the stream. A browser that reconnects gets the latest values at once."""
    await check_access(request, run_id)

    async def events() -> AsyncIterator[str]:
        async for values in everystep.awatch(run_id):
            yield f"data: {json.dumps(values, cls=DjangoJSONEncoder)}\n\n"
        run = await Workflow.objects.aget(id=run_id)
        yield f"event: end\ndata: {json.dumps({'status': run.status})}\n\n"

    response = StreamingHttpResponse(events(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on, do not buffer
    return response
