#!/usr/bin/env bash
# The whole check: lint, types, layer contracts, the documentation site, then the tests (CPU-only;
# GPU and TensorRT tests skip themselves where the hardware is missing):
#   bash scripts/test.sh           the fast set and the slow tests marked `ci`, in one pytest run (what CI
#                                  runs; see docs/testing.md for how long it takes)
#   bash scripts/test.sh --fast    lint, types, contracts, the documentation and the fast set only
#   bash scripts/test.sh --all     the fast set and the whole slow set
# The fast set is unit and small integration tests; the slow set (marker `slow`) starts real
# multi-node Ray clusters, kills processes, runs long searches and installs the wheel into a
# fresh virtual environment. The tests run on $LATNAS_TEST_WORKERS pytest-xdist workers (default: one
# per core, at most 4; 1 runs them in order in one process). Extra arguments after the option go to
# pytest; the run ends with its 15 slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
sel="not gpu and not tensorrt and (not slow or ci)"
case "${1:-}" in
  --fast) sel="not gpu and not tensorrt and not slow"; shift ;;
  --all)  sel="not gpu and not tensorrt"; shift ;;
esac
tmp=$(mktemp -d); mypy_pid=""
trap '[ -n "$mypy_pid" ] && kill "$mypy_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
echo "== ruff";          "$PY" -m ruff check search_spaces latency_predictor nas benchmarks scripts tests examples
# mypy reads torch's, Ray's and MLflow's sources on a clean checkout (a minute or more): it runs
# beside the other checks and the tests, and its verdict is given (and counted) at the end
"$PY" -m mypy > "$tmp/mypy.log" 2>&1 & mypy_pid=$!
echo "== import-linter"; lint-imports
# the documentation site, strictly: a broken link or anchor, a page missing from the nav, a missing
# include or an API reference that does not resolve fails; the site is built into a temporary folder
echo "== mkdocs"
NO_MKDOCS_2_WARNING=1 "$PY" -m mkdocs build --strict --site-dir "$tmp/site"
# One pytest run over the selected tests. A module is one unit of work (see tests/conftest.py), so its
# fixtures are set up once.
workers=${LATNAS_TEST_WORKERS:-$("$PY" -c "import os; print(min(4, len(os.sched_getaffinity(0))))")}
# A worker that dies (a native crash takes the process with it) ends the run at once, naming the test it
# was running, instead of being replaced: pytest-xdist's group scheduling can wait forever for the groups
# the dead worker held. The whole run is also held to LATNAS_TEST_LIMIT_MIN minutes (default 45), so a
# hang is a failure with a message, never a CI job that runs out its own limit.
if [ "$workers" -gt 1 ]; then par=(-n "$workers" --dist loadgroup --no-loadscope-reorder --max-worker-restart=0)
else par=(-p no:xdist); fi
limit_min=${LATNAS_TEST_LIMIT_MIN:-45}
echo "== pytest ($sel; $workers worker(s))"
status=0
timeout --signal=INT --kill-after=60 "${limit_min}m" "$PY" -m pytest -m "$sel" "${par[@]}" --durations=15 "$@" \
  || status=$?
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
  echo "== pytest did not finish within ${limit_min} minutes (LATNAS_TEST_LIMIT_MIN): stopped" >&2
fi
echo "== mypy"
mypy_status=0; wait "$mypy_pid" || mypy_status=$?; mypy_pid=""
cat "$tmp/mypy.log"
[ "$mypy_status" = 0 ] || exit "$mypy_status"
exit "$status"
