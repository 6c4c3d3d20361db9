#!/usr/bin/env bash
# The commands of bench/README.md's "Where we stand" table, in the table's order: about 20
# minutes on 2 vCPUs. Run it on a quiet machine (no test suites, no other benchmarks); each
# command appends its result line to bench/results/<kind>.jsonl.
#
#   bench/headline.sh                 # LABEL=current by default
#   LABEL=after-42 bench/headline.sh
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
label=${LABEL:-current}
for db in postgres mariadb sqlite; do
    $py bench/compare.py --db "$db" --runs 500 --repeat 3 --conn-max-age 600 --label "$label"
done
for db in postgres mariadb sqlite; do
    $py bench/instructions.py --db "$db" --label "$label"
done
for db in postgres mariadb sqlite; do
    $py bench/statements.py --db "$db" --label "$label"
done
$py bench/run.py --db postgres --only pickup --samples 100 --label "$label"
$py bench/fanout.py --db postgres --label "$label"
