"""The ASGI project of ``bench/waiters_held.py``, in one module: its settings
(``everystep_bench.settings`` with its middleware, plus the URLconf below), its URLconf
and the views of ``tests/integration/waiting_site.py`` — the two documented ways of
waiting in an ASGI view, each reading the ORM first, as a view that checks who may see a
run does (docs/progress.md's stream, docs/async.md's view). The views are the bench's
code, not the library's: a tree measured with ``--source`` needs none of them. Served by
uvicorn:

    DJANGO_SETTINGS_MODULE=everystep_bench.waiting_asgi \\
        python -m uvicorn --factory django.core.asgi:get_asgi_application

- ``GET /stream/<run>/``: the run's published values as Server-Sent Events from
  ``awatch``, then an ``end`` event with its status;
- ``GET /result/<run>/``: ``aresult(run)``, answered as JSON.
"""

from __future__ import annotations

from everystep_bench.settings import *  # noqa: F403
from tests.integration.waiting_site import urlpatterns as urlpatterns

ROOT_URLCONF = "everystep_bench.waiting_asgi"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
