"""Shared steps before any timing: check the input shape, build the network, export it to ONNX.

The ONNX export uses torch's TorchScript-based exporter (``dynamo=False``): it takes 0.1-0.3 s
for a mobile-sized network, against several seconds for the new exporter, and gives the same
latency. Its node names keep the module path (``/blocks/blocks.3/body/...``), which is what the
per-block breakdown maps times onto.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence

import torch
from torch import nn

from latency_predictor.errors import ConfigError, ExportError
from search_spaces import Arch, build

DEFAULT_INPUT_SHAPE: tuple[int, int, int, int] = (1, 3, 224, 224)
DEFAULT_OPSET = 17
INPUT_NAME = "input"
OUTPUT_NAME = "logits"


def validate_input_shape(shape: Sequence[int], in_chans: int | None = 3) -> tuple[int, int, int, int]:
    """Check that ``shape`` is a batch of images the network can take: ``(N, in_chans, H, W)``
    (``in_chans`` None: any channel count, the network being built for the shape's).

    Raises:
        ConfigError: not four positive integers, or the wrong channel count.
    """
    try:
        dims = tuple(shape)
    except TypeError:
        raise ConfigError(f"input_shape must be a sequence (N, C, H, W), got {shape!r}") from None
    if len(dims) != 4:
        raise ConfigError(f"input_shape must have 4 dimensions (N, C, H, W), got {list(dims)}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ConfigError(f"input_shape dimensions must be positive integers, got {list(dims)}")
    if in_chans is not None and dims[1] != in_chans:
        raise ConfigError(
            f"input_shape has {dims[1]} channels but the network takes {in_chans}: use (N, {in_chans}, H, W)"
        )
    return (dims[0], dims[1], dims[2], dims[3])


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse ``"1x3x224x224"`` or ``"1,3,224,224"``.

    Raises:
        ConfigError: not a list of integers.
    """
    parts = text.replace("x", ",").replace("X", ",").split(",")
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        raise ConfigError(f"input shape {text!r} is not like '1x3x224x224'") from None


def build_eval_net(arch: Arch, num_classes: int = 1000, in_chans: int = 3) -> nn.Module:
    """The network of ``arch`` in inference mode (BatchNorm uses running statistics, no dropout)."""
    return build(arch, num_classes=num_classes, in_chans=in_chans).eval()


def sample_input(shape: Sequence[int], dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """A reproducible random input of ``shape`` (the values do not change the latency of these networks)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tuple(shape), generator=g).to(dtype)


def export_onnx(net: nn.Module, input_shape: Sequence[int], opset: int = DEFAULT_OPSET) -> bytes:
    """Export ``net`` at a static ``input_shape`` to an in-memory ONNX model.

    Raises:
        ExportError: the exporter failed (its message is included).
    """
    buf = io.BytesIO()
    x = sample_input(input_shape)
    threads = torch.get_num_threads()
    # Tracing runs the network once; one thread avoids OpenMP barriers stalling on a busy machine
    # (seen: 2.5 s with two contended threads against 0.3 s with one, for MobileNetV2 at 224x224).
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        # The TorchScript exporter warns that it is deprecated; it is chosen deliberately (see above).
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        try:
            with torch.no_grad():
                # The TorchScript exporter writes to file objects too (its annotation says paths only).
                torch.onnx.export(
                    net, (x,), buf,  # type: ignore[arg-type]
                    dynamo=False, opset_version=opset, do_constant_folding=True,
                    input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                )
        except (RuntimeError, ValueError, TypeError, torch.onnx.errors.OnnxExporterError) as err:
            raise ExportError(f"ONNX export failed: {err}") from err
        finally:
            torch.set_num_threads(threads)
    return buf.getvalue()
