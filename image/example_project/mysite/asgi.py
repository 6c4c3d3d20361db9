"""The project as an ASGI application: `uvicorn mysite.asgi:application`. Under ASGI an
open progress stream (shop/views.py) is a coroutine waiting, not a thread held.

An ASGI server serves no static files (the admin's and everystep's stylesheets): with
DEBUG on (DJANGO_DEBUG=1, development) Django's handler for them wraps the application,
as runserver does; in a deployment, collectstatic and a web server (or WhiteNoise)."""

import os

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
application = get_asgi_application()
if settings.DEBUG:
    application = ASGIStaticFilesHandler(application)
