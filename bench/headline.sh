#!/usr/bin/env bash
# The commands of bench/README.md's "Where we stand" table, in the table's order: about 20
# minutes on 2 vCPUs. The commands are the rows of bench/headline_table.py (one definition
# for the table and this script). Run it on a quiet machine (no test suites, no other
# benchmarks); each command appends its result line to bench/results/<kind>.jsonl; then
# set the README marker's label to LABEL and run `bench/headline_table.py --write`.
#
#   bench/headline.sh                 # LABEL=current by default
#   LABEL=after-42 bench/headline.sh
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
label=${LABEL:-current}
mapfile -t commands < <($py bench/headline_table.py --commands)
for command in "${commands[@]}"; do
    # shellcheck disable=SC2086  # a command is its script and its flags, split on spaces
    $py bench/$command --label "$label"
done
