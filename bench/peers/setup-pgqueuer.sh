#!/usr/bin/env bash
# A venv of its own for bench/peers/pgqueuer_queue.py: PgQueuer, asyncpg and psycopg, pinned.
# Never the project's .venv.
#
#   bash bench/peers/setup-pgqueuer.sh            # /tmp/pgqueuer-venv
#   PGQ_VENV=/somewhere bash bench/peers/setup-pgqueuer.sh
#   "${PGQ_VENV:-/tmp/pgqueuer-venv}"/bin/python bench/peers/pgqueuer_queue.py --runs 500
set -euo pipefail

VENV="${PGQ_VENV:-/tmp/pgqueuer-venv}"
PYTHON="${PYTHON:-python3}"

# The versions measured (bench/peers/README.md); change them here, and say so in the results.
PGQUEUER_VERSION="1.6.0"
ASYNCPG_VERSION="0.32.0"
PSYCOPG_VERSION="3.3.9"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet \
    "pgqueuer==$PGQUEUER_VERSION" \
    "asyncpg==$ASYNCPG_VERSION" \
    "psycopg[binary]==$PSYCOPG_VERSION"

echo "venv: $VENV"
"$VENV/bin/python" - <<'PY'
import sys
from importlib.metadata import version

print(f"python {sys.version.split()[0]}")
for name in ("pgqueuer", "asyncpg", "psycopg", "psycopg-binary"):
    print(f"{name} {version(name)}")
PY
