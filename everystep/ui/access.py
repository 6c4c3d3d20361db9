"""Who may see the UI's pages: ``ui_view``, the one rule every page follows.

Every page needs an active staff user; anonymous and non-staff users are sent to the
admin login (``settings.LOGIN_URL`` when the admin is not mounted). ``EVERYSTEP_UI_PUBLIC
= True`` (exactly ``True``, read at each request) opens the read-only pages to everyone.
Write actions have rules of their own (``actions``, ``bulk``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_safe

from everystep import conf

View = Callable[..., HttpResponse]


def login_url() -> str:
    """Where an anonymous user is sent: the admin's login, else ``LOGIN_URL``."""
    try:
        return reverse("admin:login")
    except NoReverseMatch:
        return resolve_url(settings.LOGIN_URL)


def ui_view(view: View) -> View:
    """Staff only unless ``EVERYSTEP_UI_PUBLIC is True``; GET/HEAD only; never cached;
    sets the CSRF cookie."""

    @functools.wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if conf.ui_public():
            return view(request, *args, **kwargs)
        checked = staff_member_required(view, login_url=login_url())
        return checked(request, *args, **kwargs)

    # ensure_csrf_cookie: the action forms' tokens need the cookie, which nothing else
    # sets in a project that left CsrfViewMiddleware out (the actions still check it).
    return never_cache(require_safe(ensure_csrf_cookie(guarded)))
