#!/usr/bin/env bash
# Installs LatNAS (editable, from this checkout) into the current Python environment.
#   bash scripts/install.sh          the tool, with ONNX Runtime's CPU build
#   bash scripts/install.sh --dev    the tool, the test tools (pytest, ruff, mypy, import-linter) and MkDocs
#   bash scripts/install.sh --gpu    the tool with ONNX Runtime's GPU build (onnxruntime-gpu) instead
#   bash scripts/install.sh --cluster  also Ray's dashboard (ray[default]): a cluster's head node, for
#                                    `ray job submit` and `ray up` (--dev includes it)
#
# torch is installed first, because a plain `torch` requirement on a machine with nothing
# installed pulls a CUDA build of several GB:
#   - where no NVIDIA GPU answers `nvidia-smi -L`, the CPU-only build `torch==<version>+cpu` is
#     installed: from the configured indexes or local wheels when they hold it, otherwise from
#     PyTorch's CPU wheel index (https://download.pytorch.org/whl/cpu);
#   - where a GPU is present, the default (CUDA) build `torch==<version>` from PyPI;
#   - LATNAS_TORCH_INDEX=<url> takes `torch==<version>` from that index instead, either way.
# A torch that is already installed is kept.
#
# ONNX Runtime comes in two builds that install the same Python module: exactly one is
# installed (the `cpu` or `gpu` extra), and the other is removed if present.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=${LATNAS_TORCH_VERSION:-2.13.0}
CPU_INDEX=https://download.pytorch.org/whl/cpu
dev=0
gpu=0
cluster=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    --gpu) gpu=1 ;;
    --cluster) cluster=1 ;;
    *) echo "install.sh: unknown option '$arg' (use --dev, --gpu and/or --cluster)" >&2; exit 2 ;;
  esac
done
pipi() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

if "$PY" -c "import torch" 2>/dev/null; then
  echo "install.sh: torch $("$PY" -c 'import torch; print(torch.__version__)') already installed; kept"
elif [ -n "${LATNAS_TORCH_INDEX:-}" ]; then
  echo "install.sh: installing torch $TORCH_VERSION from $LATNAS_TORCH_INDEX"
  pipi "torch==$TORCH_VERSION" --index-url "$LATNAS_TORCH_INDEX"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "install.sh: NVIDIA GPU found: installing torch $TORCH_VERSION (CUDA build, from PyPI)"
  pipi "torch==$TORCH_VERSION"
else
  echo "install.sh: no GPU found: installing torch $TORCH_VERSION+cpu (CPU-only build)"
  if ! pipi "torch==$TORCH_VERSION+cpu" 2>/dev/null; then
    echo "install.sh: not in the configured indexes; taking it from $CPU_INDEX"
    pipi "torch==$TORCH_VERSION+cpu" --extra-index-url "$CPU_INDEX"
  fi
fi

if [ "$gpu" = 1 ]; then
  ort=gpu; mine=onnxruntime-gpu; other=onnxruntime
else
  ort=cpu; mine=onnxruntime; other=onnxruntime-gpu
fi
extras="$ort"
[ "$dev" = 1 ] && extras="$extras,dev"
[ "$cluster" = 1 ] && extras="$extras,cluster"
if "$PY" -m pip show -q "$other" >/dev/null 2>&1; then
  echo "install.sh: removing $other (it shares its module with the $ort build)"
  "$PY" -m pip uninstall -y -q "$other"
  # Removing one build deletes the module files the two share: put this build's back.
  pipi --force-reinstall --no-deps "$mine>=1.18"
fi
pipi -e ".[$extras]"
echo "install.sh: done (torch $("$PY" -c 'import torch; print(torch.__version__)'), ONNX Runtime $ort build)"
