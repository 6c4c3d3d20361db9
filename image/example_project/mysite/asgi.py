"""The project as an ASGI application: `uvicorn mysite.asgi:application`. Under ASGI an
open progress stream (shop/views.py) is a coroutine waiting, not a thread held."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
application = get_asgi_application()
