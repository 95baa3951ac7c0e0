#!/usr/bin/env bash
# Every test, in two phases (the README's test command; CI runs it):
#   1. every test not marked `quiet`, spread over the machine's cores by pytest-xdist, a file to a worker
#      (a module's fixtures, e.g. its server or the resume driver, are set up once);
#   2. the `quiet` tests, alone and one at a time: they judge real timings (a real run banks a measured
#      win), and any other test running beside them would make their reps CONTENDED_LEG.
# Extra arguments go to both phases (e.g. `bash scripts/test.sh -x`, `bash scripts/test.sh tests/test_graph.py`).
# PERFWARDEN_TEST_WORKERS sets phase 1's worker count (default: one per core this process may use, `nproc`;
# not xdist's `auto`, which counts physical cores when psutil is installed: one on a 2-vCPU machine).
# `python -m pytest` still runs every tier in one process, one test at a time (slower, same tests).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python
workers=${PERFWARDEN_TEST_WORKERS:-$(nproc 2>/dev/null || echo auto)}

start=$(date +%s)
echo "== phase 1: every test not marked quiet, on $workers xdist workers"
"$PY" -m pytest -m "not quiet" -n "$workers" --dist loadfile "$@"
rc1=$?
mid=$(date +%s)
echo "== phase 2: the quiet tests, alone (they judge real timings)"
# Without arguments, only the files naming the marker are collected: importing every other test module
# again costs seconds and finds no quiet test (tests/test_tiers.py checks every quiet test's file is named).
quiet_files=()
if [ "$#" -eq 0 ]; then
    mapfile -t quiet_files < <(grep -l "mark\.quiet" tests/test_*.py)
fi
"$PY" -m pytest -m "quiet" -p no:xdist "${quiet_files[@]}" "$@"
rc2=$?
end=$(date +%s)
echo "== phase 1: exit $rc1 in $((mid - start)) s; phase 2: exit $rc2 in $((end - mid)) s; all: $((end - start)) s"
# pytest's exit code 5 is "no test collected": a phase the arguments leave empty is no failure, but two
# empty phases ran nothing, and that is not a pass.
if [ "$rc1" -eq 5 ] && [ "$rc2" -eq 5 ]; then exit 5; fi
for rc in "$rc1" "$rc2"; do
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
exit 0
