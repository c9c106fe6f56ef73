#!/usr/bin/env bash
# The whole check: lint, types, layer contracts, then the tests in two sets (CPU-only; GPU and
# TensorRT tests skip themselves where the hardware is missing):
#   bash scripts/test.sh           everything: the fast set, then the slow set (what CI runs)
#   bash scripts/test.sh --fast    lint, types, contracts and the fast set only (a few minutes)
# The fast set is unit and small integration tests; the slow set (marker `slow`) starts real
# multi-node Ray clusters, kills processes, runs long searches and installs the wheel into a
# fresh virtual environment. Extra arguments after the option go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
fast_only=0
if [ "${1:-}" = "--fast" ]; then fast_only=1; shift; fi
echo "== ruff";          "$PY" -m ruff check search_spaces latency_predictor nas benchmarks scripts tests
echo "== mypy";          "$PY" -m mypy
echo "== import-linter"; lint-imports
echo "== pytest (fast set)"
"$PY" -m pytest "$@"
if [ "$fast_only" = 0 ]; then
  echo "== pytest (slow set)"
  "$PY" -m pytest -m "slow and not gpu and not tensorrt" "$@"
fi
