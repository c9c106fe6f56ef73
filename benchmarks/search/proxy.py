"""The cheap evaluation the search benchmarks share: predicted latency and the NASWOT score.

* Latency: the learned predictor of ONNX Runtime CPU latency (1 thread, 1x3x224x224) on the
  ``mobile`` space. Loaded from the file the predictor benchmark saves; when that is missing it
  is fitted on that benchmark's dataset; when the dataset is missing too, a small one is
  collected first (minutes).
* Accuracy estimate: NASWOT (Mellor et al. 2021) on one 32-image minibatch of digits at 32x32,
  at a fixed initialisation seed, so an architecture always gets the same score.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import ROOT
from latency_predictor.errors import LatencyError
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.timing import MeasureConfig
from latency_predictor.prediction.collection import collect, default_out
from latency_predictor.prediction.dataset import Dataset as LatencyDataset
from latency_predictor.prediction.predictor import PredictorEstimator, expected_target, load_predictor
from latency_predictor.prediction.target import PredictorTarget
from latency_predictor.prediction.training import fit_predictor
from nas.accuracy.zero_cost import naswot_score
from nas.core.config import DataConfig
from nas.data import ProxyData, load_dataset
from search_spaces import Arch, SearchSpace, build

PREDICTOR_FILE = ROOT / ".latnas" / "predictors" / "mobile-onnxruntime-cpu.json"
NASWOT_BATCH = 32
SMALL_COLLECTION = 60


def _target(space: SearchSpace) -> PredictorTarget:
    measure = MeasureConfig(warmup_runs=5, warmup_s=0.1, min_runs=40, min_time_s=0.3, max_time_s=3.0)
    est = make_estimator("onnxruntime", input_shape=(1, 3, 224, 224), intra_op_threads=1, measure=measure)
    return PredictorTarget.create(space, est)


def latency_predictor_for(space: SearchSpace, path: Path = PREDICTOR_FILE) -> tuple[PredictorEstimator, str]:
    """The ONNX Runtime CPU latency predictor of ``space`` and where it came from."""
    if path.exists():
        try:
            return load_predictor(path, expected_target(space, intra_op_threads=1), space), "saved predictor file"
        except LatencyError:
            pass  # saved for another setting or space: fit one on this setting's dataset below
    target = _target(space)
    data = default_out(space, target)
    origin = "fitted on the predictor benchmark's dataset"
    if not (data / "dataset.json").exists():
        collect(space, make_estimator("onnxruntime", input_shape=(1, 3, 224, 224), intra_op_threads=1),
                data, SMALL_COLLECTION, seed=0)
        origin = f"fitted on a small dataset collected now ({SMALL_COLLECTION} architectures)"
    return fit_predictor(LatencyDataset.open(data, expected=target)), origin


@dataclass
class ProxyEvaluator:
    """Predicted latency and NASWOT score of architectures, memoised by architecture.

    Attributes:
        predictor: the latency predictor.
        data: the proxy dataset (digits).
        cache: architecture -> (score, latency_ms).
        seconds: time spent scoring (NASWOT) and predicting latency, and calls made.
    """

    predictor: PredictorEstimator
    data: ProxyData
    cache: dict[Arch, tuple[float, float]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=lambda: {"naswot": 0.0, "latency": 0.0, "calls": 0})

    @classmethod
    def create(cls, space: SearchSpace) -> tuple[ProxyEvaluator, str]:
        """An evaluator for ``space`` (and where its predictor came from)."""
        # One torch thread: on a shared two-core machine two OpenMP threads wait on each other
        # (NASWOT took 2.5 s instead of 0.14 s per network here).
        torch.set_num_threads(1)
        pred, origin = latency_predictor_for(space)
        return cls(pred, load_dataset(DataConfig(name="digits", resolution=32))), origin

    def score(self, arch: Arch) -> float:
        """NASWOT score of ``arch`` (fixed initialisation and minibatch)."""
        t0 = time.perf_counter()
        torch.manual_seed(0)
        model = build(arch, num_classes=self.data.num_classes, dropout=0.0)
        s = naswot_score(model, self.data, NASWOT_BATCH, torch.device("cpu"), seed=0)
        self.seconds["naswot"] += time.perf_counter() - t0
        return s

    def latency_ms(self, archs: list[Arch]) -> np.ndarray:
        """Predicted latencies (ms) of a batch."""
        t0 = time.perf_counter()
        out = self.predictor.predict_many(archs)
        self.seconds["latency"] += time.perf_counter() - t0
        return out

    def __call__(self, arch: Arch) -> tuple[float, float]:
        """``(naswot_score, predicted_latency_ms)`` of ``arch``."""
        hit = self.cache.get(arch)
        if hit is None:
            self.seconds["calls"] += 1
            hit = (self.score(arch), float(self.latency_ms([arch])[0]))
            self.cache[arch] = hit
        return hit

    def describe(self) -> dict[str, Any]:
        """How the evaluation works, for the record."""
        return {
            "latency": "learned predictor of ONNX Runtime CPU p50 (1 intra-op thread, 1x3x224x224)",
            "accuracy_estimate": f"NASWOT score, one {NASWOT_BATCH}-image digits minibatch at 32x32, "
                                 "initialisation seed 0 (a score, not an accuracy)",
        }
