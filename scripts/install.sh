#!/usr/bin/env bash
# Installs LatNAS into the current Python environment.
#   bash scripts/install.sh          the tool
#   bash scripts/install.sh --dev    the tool and the test tools (pytest, ruff, mypy, import-linter)
#   bash scripts/install.sh --gpu    the tool with onnxruntime-gpu in place of onnxruntime
# torch is installed first: a plain `torch` requirement on a machine with nothing installed
# pulls a multi-GB CUDA build, so where no NVIDIA GPU is present we pin the CPU-capable
# release (set LATNAS_TORCH_INDEX to a CPU wheel index to force a CPU-only build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=${LATNAS_TORCH_VERSION:-2.13.0}
extras=""
gpu=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="[dev]" ;;
    --gpu) gpu=1 ;;
    *) echo "install.sh: unknown option '$arg' (use --dev and/or --gpu)" >&2; exit 2 ;;
  esac
done
pipi() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

if "$PY" -c "import torch" 2>/dev/null; then
  echo "install.sh: torch $("$PY" -c 'import torch; print(torch.__version__)') already installed"
elif [ -n "${LATNAS_TORCH_INDEX:-}" ]; then
  pipi "torch==$TORCH_VERSION" --index-url "$LATNAS_TORCH_INDEX"
else
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "install.sh: NVIDIA GPU found: installing torch $TORCH_VERSION (CUDA build)"
  else
    echo "install.sh: no GPU found: installing torch $TORCH_VERSION"
  fi
  pipi "torch==$TORCH_VERSION"
fi
pipi -e ".$extras"
if [ "$gpu" = 1 ]; then
  # onnxruntime and onnxruntime-gpu install the same module: keep exactly one.
  "$PY" -m pip uninstall -y -q onnxruntime || true
  pipi "onnxruntime-gpu>=1.18"
fi
echo "install.sh: done"
