"""End-to-end latency: the cost of preparing an input, measured and added to the network's.

A deployed classifier does not receive a normalised tensor: it receives an encoded image
(a JPEG from a camera or an upload, a PNG) or a raw frame, which is decoded, resized to the
network's input, scaled and normalised the way the export's preprocessing record says
(``(rgb_uint8 / 255 - mean) / std``, NCHW, float32). On small networks this often costs more
than the network itself, so a latency target for the whole request needs it counted.

:func:`measure_preprocessing` times that pipeline (Pillow's decoder and bilinear resize, NumPy's
arithmetic; one thread) with the same protocol as the networks, on a synthetic photograph-like
image of ``source_size`` (smooth gradients and texture, so the encoder works as on a real photo)
encoded once in ``format``. It does not depend on the architecture, so a search measures it once
and :func:`add_preprocessing` adds it to every candidate's figures: each percentile is the sum of
the network's and the preprocessing's at that percentile, which for the tail is an upper
estimate (the two slowest runs rarely coincide). The network's own figures stay in the record
(``extra["model_stats"]``) beside the preprocessing's (``extra["preprocessing"]``).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from latency_predictor.errors import ConfigError
from latency_predictor.measurement.protocol import LatencyResult, LatencyStats
from latency_predictor.measurement.timing import MeasureConfig, measure_latency

FORMATS = ("jpeg", "png", "raw")
"""What arrives: an encoded JPEG or PNG (decoded, then resized), or a raw RGB frame (resized only)."""

_PERCENTILES = ("p50", "p90", "p95", "p99")


@dataclass(frozen=True)
class Preprocessing:
    """One input pipeline: what arrives and what the network takes.

    Attributes:
        format: one of :data:`FORMATS`.
        source_size: the arriving image's ``(height, width)``.
        input_shape: the network's input, batch first ``(N, 3, H, W)``.
        mean: per-channel mean of the normalisation.
        std: per-channel standard deviation of the normalisation.
        quality: JPEG quality the sample image is encoded at.
    """

    format: str
    source_size: tuple[int, int]
    input_shape: tuple[int, ...]
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.25, 0.25, 0.25)
    quality: int = 90

    @classmethod
    def create(cls, format: str, source_size: Sequence[int], input_shape: Sequence[int],
               mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> Preprocessing:
        """A checked pipeline.

        Raises:
            ConfigError: an unknown format, a source size that is not two whole numbers >= 1,
                an input shape that is not ``(N, 3, H, W)``, or a zero standard deviation.
        """
        if format not in FORMATS:
            raise ConfigError(f"latency.preprocessing {format!r} is unknown; choose one of {list(FORMATS)} "
                              "(or null: the network alone)")
        size = list(source_size)
        if len(size) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in size):
            raise ConfigError(f"latency.source_size must be [height, width] in whole pixels >= 1, got {size!r}")
        shape = tuple(int(v) for v in input_shape)
        if len(shape) != 4 or shape[1] != 3:
            raise ConfigError(f"preprocessing makes RGB images: the input shape must be (N, 3, H, W), got {shape}")
        m = tuple(float(v) for v in (mean if mean is not None else cls.mean))
        s = tuple(float(v) for v in (std if std is not None else cls.std))
        if len(m) != 3 or len(s) != 3 or any(v == 0 for v in s):
            raise ConfigError(f"preprocessing needs 3 means and 3 non-zero standard deviations, got {m} and {s}")
        return cls(format, (size[0], size[1]), shape, m, s)

    def describe(self) -> str:
        """E.g. ``jpeg 480x640 -> 1x3x224x224``."""
        h, w = self.source_size
        return f"{self.format} {h}x{w} -> {'x'.join(map(str, self.input_shape))}"


def sample_image(spec: Preprocessing) -> np.ndarray:
    """A deterministic photograph-like RGB image, ``uint8`` ``(H, W, 3)`` of ``spec.source_size``."""
    h, w = spec.source_size
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    rng = np.random.default_rng(0)
    texture = rng.normal(0.0, 12.0, (h, w, 3)).astype(np.float32)
    base = np.stack([128 + 90 * np.sin(x / max(w, 1) * 6.0 + c) * np.cos(y / max(h, 1) * 4.0 - c)
                     for c in range(3)], axis=-1)
    return np.clip(base + texture, 0, 255).astype(np.uint8)


def pipeline(spec: Preprocessing) -> Callable[[], np.ndarray]:
    """The preprocessing of one request (a batch of ``N`` images), ready to run repeatedly."""
    from PIL import Image

    n, _, out_h, out_w = spec.input_shape
    frame = sample_image(spec)
    encoded = b""
    if spec.format != "raw":
        buf = io.BytesIO()
        Image.fromarray(frame).save(buf, format="JPEG" if spec.format == "jpeg" else "PNG",
                                    **({"quality": spec.quality} if spec.format == "jpeg" else {}))
        encoded = buf.getvalue()
    scale = (1.0 / (255.0 * np.asarray(spec.std, dtype=np.float32))).reshape(3, 1, 1)
    shift = (np.asarray(spec.mean, dtype=np.float32) / np.asarray(spec.std, dtype=np.float32)).reshape(3, 1, 1)

    def one() -> np.ndarray:
        if spec.format == "raw":
            im = Image.fromarray(frame)
        else:
            im = Image.open(io.BytesIO(encoded))
            im = im.convert("RGB")
        im = im.resize((out_w, out_h), Image.Resampling.BILINEAR)
        chw = np.asarray(im, dtype=np.float32).transpose(2, 0, 1)
        return chw * scale - shift

    def run() -> np.ndarray:
        return np.ascontiguousarray(np.stack([one() for _ in range(n)]))

    return run


def measure_preprocessing(spec: Preprocessing, measure: MeasureConfig | Mapping[str, Any] | None = None
                          ) -> LatencyStats:
    """Time :func:`pipeline` with the networks' protocol (one thread; CPU share checked).

    Args:
        spec: the pipeline.
        measure: the protocol settings (``throughput_batch_sizes`` is ignored: one request size).
    """
    if measure is None or isinstance(measure, MeasureConfig):
        cfg = measure or MeasureConfig()
    else:
        cfg = MeasureConfig(**{k: v for k, v in measure.items() if k != "throughput_batch_sizes"})
    cfg = dataclasses.replace(cfg, throughput_batch_sizes=(1,))
    run = pipeline(spec)
    run()  # the first call loads Pillow's codecs
    return measure_latency(run, cfg, cpu_threads=1).stats


def add_preprocessing(result: LatencyResult, pre: LatencyStats | Mapping[str, Any], describe: str = ""
                      ) -> LatencyResult:
    """``result`` with the preprocessing's figures added to each percentile (see the module).

    A result that already holds a preprocessing cost is returned as it is.
    """
    if "preprocessing" in result.extra:
        return result
    p = pre if isinstance(pre, LatencyStats) else LatencyStats(**dict(pre))
    s = result.stats
    total = dataclasses.replace(
        s, min=s.min + p.min, mean=s.mean + p.mean, std=float(np.hypot(s.std, p.std)),
        **{k: getattr(s, k) + getattr(p, k) for k in _PERCENTILES},
        cv=float(np.hypot(s.std, p.std)) / (s.mean + p.mean) if s.mean + p.mean > 0 else 0.0,
        ci95={k: [lo + p.ci95[k][0], hi + p.ci95[k][1]] for k, (lo, hi) in s.ci95.items() if k in p.ci95},
    )
    extra = {**result.extra, "model_stats": dataclasses.asdict(s), "preprocessing": dataclasses.asdict(p),
             "preprocessing_pipeline": describe}
    return dataclasses.replace(result, stats=total, extra=extra)


__all__ = ["FORMATS", "Preprocessing", "add_preprocessing", "measure_preprocessing", "pipeline", "sample_image"]
