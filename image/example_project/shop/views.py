"""The catalogue import's pages: start an import, and follow it in a progress bar fed by
Server-Sent Events (docs/progress.md shows this file).

Served over ASGI (mysite/asgi.py), an open stream is a coroutine waiting in
``everystep.awatch``: the watchers of one process share one wake-up and its connections,
and ``awatch`` closes the connection the access check opened before it waits. The pages
check the project's own permission (everystep's UI stays for staff), and a stream is
only for the user who started the import, or one who may view every run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import UUID

from django.core.exceptions import PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse

import everystep
from everystep import serde
from everystep.errors import WaitTimeout
from everystep.models import Workflow
from shop.workflows import IMPORT, import_catalogue

PERMISSION = "shop.import_catalogue"
# Who may follow any import, not only their own: everystep's own view permission.
VIEW_ALL = "everystep.view_workflow"
# How long one stream stays open; a browser still on the page reconnects by itself and
# gets the latest values at once, so a server never holds a stream nobody reads.
STREAM_FOR = timedelta(minutes=10)


async def check_access(request: HttpRequest, run_id: UUID | None = None) -> None:
    """403 unless the user holds the permission; for a run, 404 unless it is an import
    the user started (or the user may view every run): the permission covers one's own
    imports, not every run of the project."""
    user = await request.auser()
    if not await user.ahas_perm(PERMISSION):
        raise PermissionDenied
    if run_id is None:
        return
    run = await Workflow.objects.filter(id=run_id, name=IMPORT).only("args").afirst()
    if run is None or not (owner(run) == user.pk or await user.ahas_perm(VIEW_ALL)):
        raise Http404("no such import")


def owner(run: Workflow) -> object:
    """The user who started the import: its workflow's third argument."""
    args = serde.decode(run.args)
    return args[2] if len(args) > 2 else None


async def start_import(request: HttpRequest) -> HttpResponse:
    """GET: the form; POST: start an import and go to its page."""
    await check_access(request)
    if request.method == "POST":
        user = await request.auser()
        run = await everystep.aschedule(import_catalogue, 100, 0.05, user.pk)
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
        try:
            async for values in everystep.awatch(run_id, timeout=STREAM_FOR):
                yield f"data: {json.dumps(values, cls=DjangoJSONEncoder)}\n\n"
        except WaitTimeout:
            return  # the browser reconnects if someone still looks
        run = await Workflow.objects.aget(id=run_id)
        yield f"event: end\ndata: {json.dumps({'status': run.status})}\n\n"

    response = StreamingHttpResponse(events(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on, do not buffer
    return response
