# CI only: a stand-in for docker.io/library/postgres:16, built from Debian's PostgreSQL
# on the local base image, because no image registry is reachable on the CI machines.
# It honours what compose.yaml uses: POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, a data
# volume at /var/lib/postgresql/data, and pg_isready on the PATH.
ARG BASE_IMAGE=localhost/everystep-base:bookworm
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
RUN chmod 755 /usr/local/bin/postgres-entrypoint.sh && mkdir -p /var/run/postgresql \
    && chown postgres:postgres /var/run/postgresql
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
