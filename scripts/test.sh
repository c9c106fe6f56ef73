#!/usr/bin/env bash
# The whole check: lint, types, layer contracts, the documentation site, then the tests (CPU-only;
# GPU and TensorRT tests skip themselves where the hardware is missing):
#   bash scripts/test.sh           the fast set, then the slow tests marked `ci` (what CI runs: 27 min on 2 cores
#                                  from a clean clone, install included: 13 min fast set, 12 min slow)
#   bash scripts/test.sh --fast    lint, types, contracts, the documentation and the fast set only
#   bash scripts/test.sh --all     the fast set, then the whole slow set (about 31 minutes more)
# The fast set is unit and small integration tests; the slow set (marker `slow`) starts real
# multi-node Ray clusters, kills processes, runs long searches and installs the wheel into a
# fresh virtual environment. Extra arguments after the option go to pytest; each set ends with its
# 15 slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
slow="slow and ci"
case "${1:-}" in
  --fast) slow=""; shift ;;
  --all)  slow="slow"; shift ;;
esac
echo "== ruff";          "$PY" -m ruff check search_spaces latency_predictor nas benchmarks scripts tests examples
echo "== mypy";          "$PY" -m mypy
echo "== import-linter"; lint-imports
# the documentation site, strictly: a broken link or anchor, a page missing from the nav, a missing
# include or an API reference that does not resolve fails; the site is built into a temporary folder
echo "== mkdocs"
site=$(mktemp -d); trap 'rm -rf "$site"' EXIT
NO_MKDOCS_2_WARNING=1 "$PY" -m mkdocs build --strict --site-dir "$site"
echo "== pytest (fast set)"
"$PY" -m pytest --durations=15 "$@"
if [ -n "$slow" ]; then
  echo "== pytest ($slow)"
  "$PY" -m pytest -m "$slow and not gpu and not tensorrt" --durations=15 "$@"
fi
