#!/usr/bin/env bash
# The whole check: lint, types, layer contract, tests (CPU-only; GPU tests skip themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
echo "== ruff";          "$PY" -m ruff check search_spaces latency_predictor nas scripts tests
echo "== mypy";          "$PY" -m mypy
echo "== import-linter"; lint-imports
echo "== pytest";        "$PY" -m pytest "$@"
