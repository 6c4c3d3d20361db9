#!/usr/bin/env bash
# The flake hunt: the database and acceptance tiers on SQLite, PostgreSQL and MariaDB at
# once (their server restarts do not touch each other), N rounds in a row, under CI=true
# so a skip fails. Running the three together on a small machine is the point: timing
# assumptions that hold on a quiet machine break here. A line per tier and round goes to
# $OUT/summary.txt, each tier's full output to $OUT/<db>-<round>.log.
#
#   bench/repeat_tiers.sh 4            # OUT=/tmp/everystep-repeat by default
set -u
cd "$(dirname "$0")/.."
rounds=${1:-5}
out=${OUT:-/tmp/everystep-repeat}
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
    for db in sqlite postgres mariadb; do
        (CI=true EVERYSTEP_TEST_DB=$db timeout 1500 .venv/bin/pytest -q -p no:cacheprovider \
            tests/integration tests/acceptance >"$out/$db-$round.log" 2>&1
         echo "rc=$?" >>"$out/$db-$round.log") &
    done
    wait
    for db in sqlite postgres mariadb; do
        echo "round $round $db: $(grep -E '(passed|failed)' "$out/$db-$round.log" | tail -1)" \
            "$(tail -1 "$out/$db-$round.log")"
    done | tee -a "$out/summary.txt"
done
