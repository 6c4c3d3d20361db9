#!/bin/sh
# Initialise the cluster on first start, then run PostgreSQL in the foreground.
set -eu
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
mkdir -p "$PGDATA"
chown -R postgres:postgres "$PGDATA" /var/run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "${POSTGRES_PASSWORD:-postgres}" > /tmp/pwfile
    chown postgres /tmp/pwfile
    su postgres -s /bin/sh -c "initdb -D '$PGDATA' -U '$user' --pwfile=/tmp/pwfile --auth-local=trust --auth-host=scram-sha-256" >/dev/null
    rm -f /tmp/pwfile
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
    su postgres -s /bin/sh -c "pg_ctl -D '$PGDATA' -w -o '-c listen_addresses=' start" >/dev/null
    if [ "$db" != "postgres" ]; then
        su postgres -s /bin/sh -c "psql -U '$user' -d postgres -c 'CREATE DATABASE \"$db\"'" >/dev/null
    fi
    su postgres -s /bin/sh -c "pg_ctl -D '$PGDATA' -w stop" >/dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA"
