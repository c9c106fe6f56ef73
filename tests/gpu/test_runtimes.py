"""On a real GPU: the runtimes the latency backends drive compute the network and time it.

ONNX Runtime on its GPU providers with CPU fallback disabled, TensorRT engines, against PyTorch's
outputs; CUDA-event clocks against the wall clock; CUDA-graph replay against eager mode; the
TensorRT engine cache. Every test here carries the ``gpu`` marker, those needing TensorRT the
``tensorrt`` marker too; each skips, saying why, where its hardware or runtime is missing.
``scripts/gpu_check.py`` runs them and records their figures.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from latency_predictor.measurement.backends import OnnxRuntimeBackend, TensorRTBackend, TorchBackend, make_estimator
from latency_predictor.measurement.export import build_eval_net, export_onnx, sample_input
from latency_predictor.measurement.timing import MeasureConfig, measure_latency
from nas.deploy.export import ENGINE_RTOL
from nas.deploy.fuse import fuse_conv_bn
from search_spaces import Arch, resolve_arch
from tests.gpu.checks import (
    MEASURE,
    MIN_P50_MS,
    ORT_CUDA_RTOL,
    REPLAY_RTOL,
    SMALL_ARCH,
    SMALL_SHAPE,
    TIMING_ARCH,
    TIMING_SHAPE,
    clock_agreement,
    needs_cuda,
    needs_ort,
    needs_tensorrt,
    scaled_diff,
)

pytestmark = [pytest.mark.gpu, needs_cuda]
on_tensorrt = [pytest.mark.tensorrt, needs_tensorrt]


def small_net() -> tuple[Arch, torch.nn.Module]:
    """:data:`SMALL_ARCH`, seeded, for 10 classes, in inference mode."""
    arch = Arch.decode(SMALL_ARCH)
    torch.manual_seed(0)
    return arch, build_eval_net(arch, num_classes=10)


def torch_logits(net: torch.nn.Module, shape: tuple[int, ...]) -> np.ndarray:
    with torch.no_grad():
        return net(sample_input(shape)).numpy()


# ---------------------------------------------------------------------- outputs against PyTorch


@pytest.mark.parametrize(("provider", "precision"), [
    pytest.param("tensorrt", "fp32", id="tensorrt-fp32", marks=[*on_tensorrt, needs_ort("TensorrtExecutionProvider")]),
    pytest.param("tensorrt", "fp16", id="tensorrt-fp16", marks=[*on_tensorrt, needs_ort("TensorrtExecutionProvider")]),
    pytest.param("cuda", "fp32", id="cuda", marks=[needs_ort("CUDAExecutionProvider")]),
])
def test_onnxruntime_gpu_providers_without_cpu_fallback_compute_pytorchs_outputs(
        provider: str, precision: str, tmp_path: Path, figures: Callable[..., None]) -> None:
    arch, net = small_net()
    est = OnnxRuntimeBackend(SMALL_SHAPE, provider=provider, precision=precision, num_classes=10,
                             cache_dir=tmp_path / "ort-engines", measure=MEASURE, slot_dir=tmp_path / "slots")
    got = est.run(net, sample_input(SMALL_SHAPE).numpy())
    r = est.measure(arch, net=net)
    diff = scaled_diff(got, torch_logits(net, SMALL_SHAPE))
    tolerance = ENGINE_RTOL[precision] if provider == "tensorrt" else ORT_CUDA_RTOL
    figures(providers=r.extra["providers"], cpu_fallback=r.environment.get("cpu_fallback"), p50_ms=r.latency_ms,
            scaled_diff_vs_torch=diff, tolerance=tolerance, libraries=est.gpu_libraries)
    assert diff <= tolerance, f"outputs differ from PyTorch by {diff:.2g} of the largest logit (> {tolerance:g})"
    assert r.latency_ms > MIN_P50_MS, f"p50 {r.latency_ms * 1000:.1f} us: nothing was timed"


@pytest.mark.parametrize("precision", [pytest.param(p, marks=on_tensorrt) for p in ("fp32", "fp16")])
def test_tensorrt_engine_outputs_match_pytorch(precision: str, tmp_path: Path, figures: Callable[..., None]) -> None:
    _, net = small_net()
    trt = TensorRTBackend(SMALL_SHAPE, precision=precision, num_classes=10, cache_dir=tmp_path / "engines",
                          slot=False)
    t0 = time.perf_counter()
    engine = trt.build_engine(export_onnx(net, SMALL_SHAPE), SMALL_SHAPE)
    build_s = time.perf_counter() - t0
    xs = [sample_input(SMALL_SHAPE, seed=s).numpy() for s in (1, 2)]
    got = trt.infer(engine, xs)
    with torch.no_grad():
        want = np.concatenate([net(torch.from_numpy(x)).numpy() for x in xs])
    diff = scaled_diff(got, want)
    figures(build_s=build_s, scaled_diff_vs_torch=diff, tolerance=ENGINE_RTOL[precision], tensorrt=trt.trt_version)
    assert diff <= ENGINE_RTOL[precision], f"engine outputs differ from PyTorch by {diff:.2g} of the largest logit"


# ---------------------------------------------------------------------- clocks and CUDA graphs

CLOCKS: dict[str, tuple[str, dict[str, Any]]] = {
    "torch_eager": ("torch", {"device": "cuda:0"}),
    "torch_graphs": ("torch", {"device": "cuda:0", "cuda_graphs": True}),
    "tensorrt": ("tensorrt", {"precision": "fp16"}),
}


@pytest.fixture(scope="module")
def event_and_wall_p50(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[float, float]]:
    """The event-timed and the wall-clock-plus-sync p50 of :data:`TIMING_ARCH` on one of :data:`CLOCKS`,
    measured once per module (the graph-against-eager test reads the clock tests' figures)."""
    folder = tmp_path_factory.mktemp("clocks")
    done: dict[str, tuple[float, float]] = {}

    def p50s(name: str) -> tuple[float, float]:
        if name not in done:
            backend, options = CLOCKS[name]
            if backend == "tensorrt":
                options = {**options, "cache_dir": folder / "engines"}
            est = make_estimator(backend, input_shape=TIMING_SHAPE, measure=MEASURE, slot_dir=folder / "slots",
                                 **options)
            cfg = MeasureConfig.from_dict(dict(MEASURE))
            with est.prepared(resolve_arch(TIMING_ARCH)) as p:
                events = measure_latency(p.run_once, cfg, time_once=p.time_once)
                wall = measure_latency(p.run_once, cfg, sync=p.sync)
            done[name] = (events.stats.p50, wall.stats.p50)
        return done[name]

    return p50s


@pytest.mark.parametrize("clock", [
    "torch_eager", "torch_graphs", pytest.param("tensorrt", marks=on_tensorrt),
])
def test_cuda_event_p50_agrees_with_the_wall_clock_and_times_something(
        clock: str, event_and_wall_p50: Callable[[str], tuple[float, float]], figures: Callable[..., None]) -> None:
    """The p50 of CUDA-event times within 25 % of wall clock plus synchronise, both above 10 us (a
    graph that captured nothing, or events on an idle stream, time about 0)."""
    events, wall = event_and_wall_p50(clock)
    figures(event_p50_ms=events, wall_p50_ms=wall, arch=TIMING_ARCH, input_shape=list(TIMING_SHAPE))
    clock_agreement(events, wall)


def test_graph_replay_is_not_slower_than_eager(event_and_wall_p50: Callable[[str], tuple[float, float]],
                                               figures: Callable[..., None]) -> None:
    eager, graph = event_and_wall_p50("torch_eager")[0], event_and_wall_p50("torch_graphs")[0]
    figures(eager_p50_ms=eager, graph_p50_ms=graph)
    assert graph <= eager, f"the CUDA-graph replay ({graph:.3f} ms) is slower than eager mode ({eager:.3f} ms)"


def test_graph_replay_after_empty_cache_gives_the_eager_outputs(tmp_path: Path, figures: Callable[..., None]) -> None:
    """A replayed graph after gc.collect(), empty_cache() and new allocations still computes the network."""
    arch = resolve_arch(TIMING_ARCH)
    torch.manual_seed(0)
    est_eager = TorchBackend(TIMING_SHAPE, device="cuda:0", slot_dir=tmp_path / "slots")
    net = est_eager.build_net(arch)
    with est_eager.prepared(arch, net) as p:
        want = p.run_once().float().cpu()  # type: ignore[attr-defined]
    est = TorchBackend(TIMING_SHAPE, device="cuda:0", cuda_graphs=True, slot_dir=tmp_path / "slots")
    with est.prepared(arch, net) as p:
        gc.collect()
        torch.cuda.empty_cache()
        # Fill freed memory with NaN: a replay reading it would show.
        junk = [torch.full((1 << 20,), float("nan"), device="cuda:0") for _ in range(64)]
        got = p.run_once().float().cpu()  # type: ignore[attr-defined]
        torch.cuda.synchronize(0)
        del junk
    diff = float((got - want).abs().max() / want.abs().max())
    finite = bool(torch.isfinite(got).all())
    figures(scaled_diff_vs_eager=diff, finite=finite)
    assert finite and diff <= REPLAY_RTOL, \
        f"the replay after empty_cache differs from eager by {diff:.2g} of the largest logit (finite: {finite})"


# ---------------------------------------------------------------------- the engine cache


@pytest.mark.tensorrt
@needs_tensorrt
def test_the_fused_network_after_the_unfused_one_gets_its_own_engine(tmp_path: Path,
                                                                      figures: Callable[..., None]) -> None:
    """The Conv+BN-fused network measured after the unfused one is not served the unfused one's
    engine, and the unfused one is served from the cache again."""
    arch, net = small_net()
    est = TensorRTBackend(SMALL_SHAPE, precision="fp16", num_classes=10, cache_dir=tmp_path / "cache-check",
                          measure=MEASURE, slot_dir=tmp_path / "slots")
    unfused = est.measure(arch, net=net)
    fused = est.measure(arch, net=fuse_conv_bn(net))
    again = est.measure(arch, net=net)
    runs = (("unfused", unfused), ("fused", fused), ("unfused_again", again))
    figures(**{name: {"engine_cached": r.extra["engine_cached"], "engine": Path(r.extra["engine_path"]).name,
                      "p50_ms": r.latency_ms} for name, r in runs})
    assert not fused.extra["engine_cached"] and fused.extra["engine_path"] != unfused.extra["engine_path"], \
        "the fused network was served the unfused network's engine"
    assert again.extra["engine_cached"], "the unfused network's engine was built again instead of read from the cache"
