"""Eager PyTorch backend, on CPU or CUDA.

* CPU: each run is timed with :func:`time.perf_counter`; ``torch.set_num_threads(threads)`` is set
  for the measurement and restored afterwards (explicit, like ONNX Runtime's thread counts).
* CUDA: preparation and timing run inside ``torch.cuda.device(index)``, and each run is timed
  with a pair of ``torch.cuda.Event`` recorded around it on the stream of the network's device
  and synchronised on the end event, so the time is the device's, not the launch's.
  ``cuda_graphs=True`` captures the forward pass once in a CUDA graph on that device and times its
  replay, which removes the per-kernel launch cost that eager mode pays; the placed network and its
  static input are kept with the prepared run, because the graph reads their memory
  (:mod:`latency_predictor.measurement.backends.gpu`).
* Precision: ``fp32``; ``bf16`` (CPU or CUDA, weights and input cast); ``fp16`` (CUDA only).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Unpack

import torch
from torch import nn

from latency_predictor.errors import BackendUnavailableError, ConfigError, MeasurementError
from latency_predictor.measurement.backends import gpu
from latency_predictor.measurement.backends.base import (
    CommonOptions,
    MeasuredBackend,
    Prepared,
    check_choice,
    check_positive_int,
)
from latency_predictor.measurement.breakdown import Breakdown, make_breakdown, torch_block_times
from latency_predictor.measurement.environment import cpu_model
from latency_predictor.measurement.export import DEFAULT_INPUT_SHAPE, sample_input
from latency_predictor.measurement.slot import normalise_device
from search_spaces import Arch

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
CUDA_FIX = (
    "this needs a CUDA build of torch on a machine with an NVIDIA GPU "
    "(`bash scripts/install.sh` installs one where `nvidia-smi` finds a GPU)"
)


class TorchBackend(MeasuredBackend):
    """Measures networks in eager PyTorch.

    Args:
        input_shape: deployment shape ``(N, C, H, W)``.
        device: ``cpu`` or ``cuda:N``.
        precision: ``fp32``, ``bf16`` or ``fp16`` (CUDA only).
        threads: torch intra-op threads during the measurement.
        cuda_graphs: time a CUDA-graph replay instead of eager launches (CUDA only).
        cudnn_benchmark: let cuDNN pick the fastest convolution algorithms (CUDA only).
        channels_last: run in NHWC memory format.
        **common: the options every backend takes (:class:`CommonOptions`: ``measure``, ``slot``,
            ``slot_dir``, ``num_classes``, ``keep_samples``).

    Raises:
        ConfigError: an unknown precision or device, fp16 or CUDA graphs on CPU, bad counts or shape.
        BackendUnavailableError: CUDA (or bf16 on this GPU) is not available here.
    """

    name = "torch"
    runtime_errors = (RuntimeError,)
    has_breakdown = True

    def __init__(
        self,
        input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
        *,
        device: str = "cpu",
        precision: str = "fp32",
        threads: int = 1,
        cuda_graphs: bool = False,
        cudnn_benchmark: bool = True,
        channels_last: bool = False,
        **common: Unpack[CommonOptions],
    ) -> None:
        dev = normalise_device(device)
        check_choice("precision", precision, list(DTYPES))
        self.threads = check_positive_int("threads", threads)
        self.cuda_graphs = bool(cuda_graphs)
        self.cudnn_benchmark = bool(cudnn_benchmark)
        self.channels_last = bool(channels_last)
        if dev == "cpu":
            if precision == "fp16":
                raise ConfigError("precision 'fp16' is supported on CUDA only; use 'bf16' or 'fp32' on CPU")
            if self.cuda_graphs:
                raise ConfigError("cuda_graphs needs a CUDA device; got device='cpu'")
        super().__init__(input_shape, precision, dev, **common)
        if dev != "cpu":
            if not torch.cuda.is_available():
                raise BackendUnavailableError(f"device {dev!r}: torch sees no CUDA device; {CUDA_FIX}")
            index = int(dev.split(":")[1])
            if index >= torch.cuda.device_count():
                raise BackendUnavailableError(
                    f"device {dev!r}: only {torch.cuda.device_count()} CUDA device(s) visible"
                )
            if precision == "bf16":
                with gpu.device_scope(index):  # is_bf16_supported asks the current device
                    if not torch.cuda.is_bf16_supported():
                        raise BackendUnavailableError(f"{torch.cuda.get_device_name(index)} does not support bf16")
        self.device_index: int | None = None if dev == "cpu" else int(dev.split(":")[1])

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype of :attr:`precision`."""
        return DTYPES[self.precision]

    def _run_scope(self) -> AbstractContextManager[object]:
        return self._settings()

    @contextmanager
    def _settings(self) -> Iterator[None]:
        threads, bench = torch.get_num_threads(), torch.backends.cudnn.benchmark
        torch.set_num_threads(self.threads)
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        try:
            with ExitStack() as stack:
                if self.device_index is not None:
                    stack.enter_context(gpu.device_scope(self.device_index))
                stack.enter_context(torch.inference_mode())
                yield
        finally:
            torch.set_num_threads(threads)
            torch.backends.cudnn.benchmark = bench

    def _place(self, net: nn.Module, input_shape: tuple[int, ...]) -> tuple[nn.Module, torch.Tensor]:
        fmt = torch.channels_last if self.channels_last else torch.contiguous_format
        model = copy.deepcopy(net).to(device=self.device, dtype=self.dtype).eval()
        if self.channels_last:
            model = model.to(memory_format=fmt)  # type: ignore[call-overload]  # accepted at run time
        x = sample_input(input_shape, self.dtype).to(self.device).contiguous(memory_format=fmt)
        return model, x

    def _prepare(self, arch: Arch, net: nn.Module, input_shape: tuple[int, ...]) -> Prepared:
        model, x = self._place(net, input_shape)
        try:
            model(x)
        except RuntimeError as err:
            raise MeasurementError(f"torch: the network failed to run on {self.device}: {err}") from err
        index = self.device_index
        if index is None:
            return Prepared(
                run_once=lambda: model(x), extra={"cuda_graphs": False},
                # OpenMP workers sleep between small ops, so only the calling thread is surely busy.
                cpu_threads=1,
            )
        forward: Callable[[], object] = lambda: model(x)  # noqa: E731
        run_once = forward
        captured = None
        if self.cuda_graphs:
            captured = gpu.capture_graph(forward, index, keep=(model, x))
            run_once = captured.replay
        return Prepared(
            run_once=run_once, time_once=gpu.event_timer(run_once, gpu.device_stream(index)),
            sync=gpu.synchronizer(index), extra={"cuda_graphs": self.cuda_graphs},
            # The graph reads the weights and the input by address: they live as long as the run.
            resources=(model, x, captured),
        )

    def _backend_environment(self) -> dict[str, str]:
        env = {
            "torch_threads": str(self.threads),
            "torch_interop_threads": str(torch.get_num_interop_threads()),
            "channels_last": str(self.channels_last),
        }
        if self.device == "cpu":
            env["device_name"] = cpu_model()
        else:
            env["device_name"] = torch.cuda.get_device_name(self.device_index)
            env["cuda"] = str(torch.version.cuda)
            env["cudnn"] = str(torch.backends.cudnn.version())
            env["cudnn_benchmark"] = str(self.cudnn_benchmark)
        return env

    def _breakdown(self, arch: Arch, runs: int, warmup_runs: int) -> Breakdown:
        """In eager mode, from forward hooks (CUDA graphs are not used)."""
        with self._settings():
            model, x = self._place(self.build_net(arch), self.input_shape)
            sync = gpu.synchronizer(self.device_index) if self.device_index is not None else None
            with self.held_slot():
                for _ in range(warmup_runs):
                    model(x)
                totals = torch_block_times(model, lambda: model(x), runs, sync)
        return make_breakdown(arch.encode(), "torch-hooks", runs, totals)

