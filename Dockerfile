# everystep-runner: the everystep library with its PostgreSQL, MariaDB/MySQL and SQLite
# drivers, metrics and Sentry support, and the runner entrypoint. The user's Django
# project is mounted at /app (or baked into a derived image) and loaded at run time.
#
#   podman build -t everystep-runner .
#   podman build --build-arg BASE_IMAGE=localhost/everystep-base:bookworm \
#                -v /etc/ssl/certs/ca-certificates.crt:/host-ca.crt:ro \
#                --build-arg PIP_CERT=/host-ca.crt -t everystep-runner .
#
# Wheel source: PIP_INDEX_URL for a mirror; for a build without PyPI, put wheels in
# image/wheels/ and pass --build-arg PIP_FIND_LINKS=/src/image/wheels --build-arg PIP_NO_INDEX=1.
# Versions: image/constraints.txt pins every installed distribution (pip and setuptools too),
# so two builds of one commit hold the same code; `make image-constraints` refreshes it
# from an unpinned build (CONSTRAINTS=/dev/null): docs/security.md.
# checkov:skip=CKV_DOCKER_7: the base is the BASE_IMAGE build arg, tagged 3.12-slim by default; checkov cannot see through the variable
ARG BASE_IMAGE=docker.io/library/python:3.12-slim

FROM ${BASE_IMAGE} AS build
ARG PIP_CERT=""
ARG PIP_INDEX_URL=""
ARG PIP_FIND_LINKS=""
ARG PIP_NO_INDEX=""
ARG CONSTRAINTS=/src/image/constraints.txt
ENV DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# mysqlclient is the one driver without a wheel: it builds against libmariadb here.
# Python headers come with the official image; a Debian python3 needs python3-dev.
RUN set -eu; \
    headers=$(python3 -c 'import os, sysconfig; print("" if os.path.exists(sysconfig.get_paths()["include"] + "/Python.h") else "python3-dev")'); \
    apt-get update; \
    apt-get install -y --no-install-recommends gcc libc6-dev pkg-config libmariadb-dev $headers; \
    rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/everystep
COPY pyproject.toml README.md LICENSE /src/
COPY everystep /src/everystep
COPY image /src/image
# Empty build args must not reach pip as empty settings. The build backend is installed
# from the constraints too and used without build isolation, so it is pinned as well.
RUN set -eu; \
    for var in PIP_CERT PIP_INDEX_URL PIP_FIND_LINKS PIP_NO_INDEX; do \
        eval "[ -n \"\${$var}\" ] || unset $var"; \
    done; \
    /opt/everystep/bin/pip install -c "$CONSTRAINTS" --upgrade pip setuptools; \
    /opt/everystep/bin/pip install -c "$CONSTRAINTS" --no-build-isolation \
        "/src[postgres,mysql,metrics,sentry,tasks]" /src/image; \
    /opt/everystep/bin/python -c "import MySQLdb, psycopg, sqlite3, django_tasks, everystep_runner.cli"

FROM ${BASE_IMAGE}
# Keep equal to everystep.__version__ (tests/unit/test_version.py checks).
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="everystep-runner" \
      org.opencontainers.image.description="Durable workflow runner for Django projects (everystep)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.source="https://github.com/everystep/everystep"
ENV DEBIAN_FRONTEND=noninteractive
# Runtime libraries only: the MariaDB client library for mysqlclient, and tini as PID 1
# so SIGTERM reaches the runner (which drains) and zombies are reaped.
RUN set -eu; \
    missing=""; \
    for pkg in libmariadb3 tini; do dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"; done; \
    if [ -n "$missing" ]; then \
        apt-get update; apt-get install -y --no-install-recommends $missing; \
        rm -rf /var/lib/apt/lists/*; \
    fi
COPY --from=build /opt/everystep /opt/everystep
# A fixed non-root user in group 0, and a group-writable home, so the image also runs
# under an arbitrary UID (OpenShift, `--user 12345`). /etc/everystep (runner.toml) and
# /app stay root's, read-only to the runner even on a writable root filesystem: its
# configuration and code are mounted or built in, never written at run time.
RUN set -eu; \
    echo "everystep:x:10001:0:everystep runner:/home/everystep:/usr/sbin/nologin" >> /etc/passwd; \
    mkdir -p /home/everystep /app /etc/everystep; \
    chmod 0755 /app /etc/everystep; \
    chgrp -R 0 /home/everystep; \
    chmod -R g=u /home/everystep
# The probes (the worker's, beside its metrics; in the ui role, answered by gunicorn's
# arbiter) listen on every interface of the container (the library's default is
# 127.0.0.1): a pod's probes and Prometheus reach them there, and what is published
# beyond the container is the deployment's choice (docs/running/runner-image.md).
# Nothing at run time writes outside /tmp (the demo's database, temporary files; gunicorn's
# heartbeat files go to /dev/shm), so the image runs with a read-only root filesystem and
# no capabilities: docs/running/hardened.md.
ENV PATH=/opt/everystep/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/everystep \
    EVERYSTEP_METRICS_PORT=9117 \
    EVERYSTEP_METRICS_BIND=0.0.0.0 \
    EVERYSTEP_DEMO_DATA=/tmp/everystep-demo
USER 10001
WORKDIR /app
EXPOSE 8000 9117
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["everystep-runner", "healthcheck"]
ENTRYPOINT ["tini", "--", "everystep-runner"]
