"""A minimal Django project using everystep, as deployed: `manage.py check --deploy` passes
with DJANGO_SECRET_KEY set (tests/integration/test_example_deploy_check.py). The runner's
database_url setting (EVERYSTEP_DATABASE_URL) replaces the SQLite default below.

Environment: DJANGO_SECRET_KEY (required: no fallback, so no deployment runs on a key that
is in a public repository), DJANGO_ALLOWED_HOSTS (comma-separated, default localhost and
127.0.0.1), EXAMPLE_HTTPS (default 1: served behind a TLS-terminating proxy; compose.yaml's
localhost-only evaluation stack sets 0 to serve plain HTTP), DJANGO_DEBUG (1 for
development on your machine: Django's DEBUG, and mysite/asgi.py serves the static files;
never in a deployment)."""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

try:
    SECRET_KEY = os.environ["DJANGO_SECRET_KEY"]
except KeyError:
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is not set: give the example project a long random secret "
        "(python -c 'import secrets; print(secrets.token_urlsafe(50))')"
    ) from None
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",")

# HTTPS: the proxy in front terminates TLS and says so in X-Forwarded-Proto (it must set
# or strip that header, or a client could claim HTTPS). The probes stay plain HTTP: the
# image's HEALTHCHECK and a pod's probes call them on the container's own address.
HTTPS = os.environ.get("EXAMPLE_HTTPS", "1") != "0"
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
SECURE_SSL_REDIRECT = HTTPS
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = 31_536_000 if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
# HSTS preloading is a commitment for a whole domain, made by its owner, not by an example.
SILENCED_SYSTEM_CHECKS = ["security.W021"]
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
USE_TZ = True
# Django's default zone is America/Chicago: name one, as a real project does (UTC here,
# overridable) so that local times in logs and the UI are not Chicago's by accident.
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
# Django's task framework on everystep: shop/tasks.py's @task runs as a durable workflow.
TASKS = {"default": {"BACKEND": "everystep.tasks.EverystepBackend"}}
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "everystep",
    "shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "mysite.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("EXAMPLE_SQLITE_PATH", "/tmp/example.sqlite3"),
        "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"},
        "CONN_MAX_AGE": 300,
        "CONN_HEALTH_CHECKS": True,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"
