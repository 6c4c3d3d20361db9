"""As a project's wsgi.py: importing it sets Django up again (``get_wsgi_application``),
which reconfigures logging. A task run's name must not make a worker import it."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

from tests.testapp.import_marks import mark

mark(__name__)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

application = get_wsgi_application()
