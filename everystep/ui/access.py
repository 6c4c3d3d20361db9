"""Who may see the UI's pages: ``ui_view``, the one rule every page follows.

Every page needs an active staff user holding ``everystep.view_workflow`` (superusers
hold every permission): anonymous and non-staff users are sent to the admin login
(``settings.LOGIN_URL`` when the admin is not mounted); a staff user without the
permission gets 403, as the admin gives them. ``EVERYSTEP_UI_PUBLIC = True`` (exactly
``True``, read at each request) opens the read-only pages to everyone. Write actions have
rules of their own (``actions``, ``bulk``).

Every response of the UI, pages and actions alike, carries its own security headers
(``secured``): it is mounted in projects of every kind, with or without Django's
``SecurityMiddleware`` and ``XFrameOptionsMiddleware``, and its one-click action forms
must not be framed by another site.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_safe

from everystep import conf

View = Callable[..., HttpResponse]

VIEW_PERMISSION = "everystep.view_workflow"

# Set on every UI response unless the project already set the header itself.
HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def secured(view: View) -> View:
    """``view`` with the UI's security headers on its every response."""

    @functools.wraps(view)
    def with_headers(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            response = view(request, *args, **kwargs)
        except PermissionDenied as exc:
            # Answered here, not by the project's 403 handler, so it has the headers too.
            response = HttpResponseForbidden(
                f"403 Forbidden: {exc}\n" if str(exc) else "403 Forbidden\n",
                content_type="text/plain; charset=utf-8",
            )
        for header, value in HEADERS.items():
            response.headers.setdefault(header, value)
        # XFrameOptionsMiddleware would otherwise overwrite DENY with its own default.
        response.xframe_options_exempt = True
        return response

    return with_headers


def may_act(user: Any, permission: str) -> bool:
    """Whether ``user`` may take a write action that needs ``permission``."""
    return bool(
        user.is_authenticated
        and user.is_active
        and user.is_staff
        and user.has_perm(VIEW_PERMISSION)
        and user.has_perm(permission)
    )


def check_act(user: Any, permission: str, what: str) -> None:
    """``PermissionDenied`` saying what is missing unless ``may_act``; ``what`` names
    the action."""
    if not (user.is_authenticated and user.is_active and user.is_staff):
        raise PermissionDenied(f"{what} needs a staff login")
    for needed in (VIEW_PERMISSION, permission):
        if not user.has_perm(needed):
            raise PermissionDenied(f"{what} needs the {needed} permission")


def login_url() -> str:
    """Where an anonymous user is sent: the admin's login, else ``LOGIN_URL``."""
    try:
        return reverse("admin:login")
    except NoReverseMatch:
        return resolve_url(settings.LOGIN_URL)


def ui_view(view: View) -> View:
    """Staff with the view permission only, unless ``EVERYSTEP_UI_PUBLIC is True``;
    GET/HEAD only; never cached; sets the CSRF cookie; the security headers."""
    return _page(view, may_be_public=True)


def staff_view(view: View) -> View:
    """``ui_view``, but never public: a page about people (the audit trail names each
    operator and their reasons), where public mode is for runs."""
    return _page(view, may_be_public=False)


def _page(view: View, *, may_be_public: bool) -> View:
    def permitted(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.has_perm(VIEW_PERMISSION):
            raise PermissionDenied(f"the everystep UI needs the {VIEW_PERMISSION} permission")
        return view(request, *args, **kwargs)

    @functools.wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if may_be_public and conf.ui_public():
            return view(request, *args, **kwargs)
        checked = staff_member_required(permitted, login_url=login_url())
        return checked(request, *args, **kwargs)

    # ensure_csrf_cookie: the action forms' tokens need the cookie, which nothing else
    # sets in a project that left CsrfViewMiddleware out (the actions still check it).
    return secured(never_cache(require_safe(ensure_csrf_cookie(guarded))))
