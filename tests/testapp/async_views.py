"""Async views for the tests of the async caller API (``tests/integration/
test_async_callers.py``): each schedules runs and awaits their results, as an ASGI view
of a user's project would. Served by Django's ``AsyncClient`` and by uvicorn."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from everystep import agather, aresult, aschedule
from everystep.errors import WaitTimeout
from tests.testapp import composition as cw


async def sum_view(request: HttpRequest) -> JsonResponse:
    """Schedule ``child_sum(a, b)`` and answer with its result once it has run."""
    a, b = int(request.GET.get("a", "1")), int(request.GET.get("b", "1"))
    run = await aschedule(cw.child_sum, a, b)
    try:
        value = await aresult(run, timeout=float(request.GET.get("timeout", "60")))
    except WaitTimeout as exc:
        return JsonResponse({"run": str(run.id), "timeout": str(exc)}, status=504)
    return JsonResponse({"run": str(run.id), "result": value})


async def gather_view(request: HttpRequest) -> JsonResponse:
    """Schedule ``child_sum(i, i)`` for i < n and answer with their results in order."""
    runs = [await aschedule(cw.child_sum, i, i) for i in range(int(request.GET.get("n", "3")))]
    values = await agather(runs, timeout=float(request.GET.get("timeout", "60")))
    return JsonResponse({"runs": [str(run.id) for run in runs], "results": values})
