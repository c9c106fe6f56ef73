"""The training recipe: augmentation, warm-up and cosine schedule, label smoothing, no weight decay
on norms and biases, mixed precision and channels_last choices, seeded runs."""

from __future__ import annotations

import copy
import itertools
import math
import platform
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nas.accuracy.augment import _flip, make_augment, random_crop, random_resized_crop, resolve
from nas.accuracy.training import (
    ONEDNN_ISA_VARS,
    _param_groups,
    amp_dtype,
    channels_last_on,
    lr_factor,
    train_briefly,
    trial_environment,
)
from nas.core.config import DataConfig, TrainConfig
from nas.core.errors import TrainingError
from nas.data import load_dataset
from search_spaces import build, load_space
from tests.nas.configs import stored_config

X86 = platform.machine().lower() in ("x86_64", "amd64")


def _images(n: int = 16, side: int = 32) -> torch.Tensor:
    return torch.arange(n * 3 * side * side, dtype=torch.float32).reshape(n, 3, side, side)


def test_auto_augmentation_follows_the_image_size_and_mirror_invariance() -> None:
    assert resolve("auto", 32, True) == "crop_flip"
    assert resolve("auto", 32, False) == "crop"  # digits: a mirrored digit is another digit
    assert resolve("auto", 224, True) == "resized_crop_flip"
    assert resolve("none", 32, True) == "none"
    with pytest.raises(TrainingError, match=r"train\.augment"):
        resolve("mixup", 32, True)


def test_padded_crop_shifts_each_image_by_at_most_the_padding() -> None:
    x = _images()
    out = random_crop(x, torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    for i in range(len(x)):  # every crop is the image shifted by up to 4 pixels, zeros where it left the frame
        found = False
        for dy in range(-4, 5):
            for dx in range(-4, 5):
                shifted = torch.roll(x[i], shifts=(-dy, -dx), dims=(1, 2))
                inner = out[i, :, max(0, -dy):32 - max(0, dy), max(0, -dx):32 - max(0, dx)]
                ref = shifted[:, max(0, -dy):32 - max(0, dy), max(0, -dx):32 - max(0, dx)]
                found |= bool(torch.equal(inner, ref))
        assert found, f"image {i} is not a shifted crop"
    assert not torch.equal(out, x)  # some image moved


def test_augmentation_is_repeatable_with_the_same_seed_and_flips_half() -> None:
    x = _images(64)
    aug = make_augment("crop_flip", 32, True)
    a = aug(x, torch.Generator().manual_seed(3))
    b = aug(x, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    assert torch.equal(make_augment("none", 32, True)(x, torch.Generator()), x)
    flipped = _flip(x, torch.Generator().manual_seed(0))
    mirrored = [torch.equal(f, xi.flip(-1)) for f, xi in zip(flipped, x, strict=True)]
    kept = [torch.equal(f, xi) for f, xi in zip(flipped, x, strict=True)]
    assert all(m or k for m, k in zip(mirrored, kept, strict=True)) and 16 < sum(mirrored) < 48
    only_flip = make_augment("resized_crop_flip", 64, True)
    y = only_flip(_images(64, 64), torch.Generator().manual_seed(0))
    assert y.shape == (64, 3, 64, 64)
    rc = random_resized_crop(_images(8, 64), torch.Generator().manual_seed(0))
    assert rc.shape == (8, 3, 64, 64) and not torch.equal(rc, _images(8, 64))


def test_warm_up_then_cosine_to_zero() -> None:
    total, warmup = 100, 10
    f = [lr_factor(s, total, warmup, "cosine") for s in range(total)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)  # linear warm-up
    assert all(a >= b for a, b in itertools.pairwise(f[10:]))  # then only down
    assert f[-1] < 0.01
    assert lr_factor(50, total, warmup, "constant") == 1.0


def test_no_weight_decay_on_norms_and_biases() -> None:
    net = build(load_space("tiny").extremes()[0], num_classes=10)
    decay, no_decay = _param_groups(net, TrainConfig(weight_decay=1e-4))
    assert decay["weight_decay"] == 1e-4 and no_decay["weight_decay"] == 0.0
    bn = {id(p) for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d) for p in m.parameters()}
    assert bn and bn <= {id(p) for p in no_decay["params"]}
    assert all(p.ndim > 1 for p in decay["params"])
    assert len(_param_groups(net, TrainConfig(no_decay_norm_bias=False))) == 1


def test_label_smoothing_changes_the_training_loss() -> None:
    logits, y = torch.tensor([[4.0, 0.0, 0.0]]), torch.tensor([0])
    assert F.cross_entropy(logits, y, label_smoothing=0.1) > F.cross_entropy(logits, y)


def test_mixed_precision_is_for_cuda_and_says_so_on_the_cpu() -> None:
    cpu = torch.device("cpu")
    assert amp_dtype(TrainConfig(amp="auto"), cpu) is None and amp_dtype(TrainConfig(amp="off"), cpu) is None
    with pytest.raises(TrainingError, match=r"train\.amp=bf16 needs a CUDA device"):
        amp_dtype(TrainConfig(amp="bf16"), cpu)


def _gradients(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(1)  # the same dropout mask for every copy
    net.train()
    F.cross_entropy(net(x), y).backward()
    return torch.cat([p.grad.double().flatten() for p in net.parameters() if p.grad is not None])


@pytest.fixture
def no_isa_cap(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in ONEDNN_ISA_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.mark.parametrize("space", ["tiny", "mobile_cifar"])
def test_channels_last_on_the_cpu_needs_onednn_below_avx512_and_computes_the_same_gradients(
    space: str, no_isa_cap: pytest.MonkeyPatch,
) -> None:
    cpu = torch.device("cpu")
    assert not channels_last_on(TrainConfig(), cpu) and channels_last_on(TrainConfig(channels_last="on"), cpu)
    no_isa_cap.setenv("ONEDNN_MAX_CPU_ISA", "avx2")  # oneDNN's names, any case
    assert channels_last_on(TrainConfig(), cpu) is X86 and not channels_last_on(TrainConfig(channels_last="off"), cpu)
    no_isa_cap.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
    assert not channels_last_on(TrainConfig(), cpu)
    no_isa_cap.delenv("ONEDNN_MAX_CPU_ISA")
    no_isa_cap.setenv("DNNL_MAX_CPU_ISA", "AVX2")  # the older name
    assert channels_last_on(TrainConfig(), cpu) is X86
    torch.manual_seed(0)
    net = build(load_space(space).sample(np.random.default_rng(0)), num_classes=10)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    exact = _gradients(copy.deepcopy(net).double(), x.double(), y)  # float64: what float32 rounds
    cl = copy.deepcopy(net).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    for g in (_gradients(copy.deepcopy(net), x, y), _gradients(cl, x.contiguous(memory_format=torch.channels_last), y)):
        assert float((g - exact).norm() / exact.norm()) < 0.05  # float32 rounding, in either memory format


def test_a_search_holds_its_cpu_trials_at_avx2_unless_the_user_or_the_latency_backend_says_otherwise(
    no_isa_cap: pytest.MonkeyPatch,
) -> None:
    cap = {"ONEDNN_MAX_CPU_ISA": "AVX2"} if X86 else {}
    assert trial_environment(TrainConfig(), False) == cap
    assert trial_environment(TrainConfig(device="cpu"), False) == cap
    assert trial_environment(TrainConfig(), True) == {}  # PyTorch timed on the CPU: oneDNN's own choice
    assert trial_environment(TrainConfig(channels_last="off"), False) == {}
    assert trial_environment(TrainConfig(device="cuda:0"), False) == {}
    no_isa_cap.setenv("ONEDNN_MAX_CPU_ISA", "ALL")  # the user's choice holds
    assert trial_environment(TrainConfig(), False) == {}


def test_the_comparisons_training_workers_hold_the_cap_though_their_caller_never_set_it(
    no_isa_cap: pytest.MonkeyPatch,
) -> None:
    """``benchmarks.search.cifar10_deploy.train_all`` may be called from any script: its workers set the cap
    themselves before any kernel runs, so every training there is channels-last, as its record says."""
    import os

    from benchmarks.search.cifar10_deploy import _training_worker
    from nas.runtime.workers import in_workers

    env = trial_environment(TrainConfig(device="cpu"), False)
    assert "ONEDNN_MAX_CPU_ISA" not in os.environ
    seen = list(in_workers(os.getenv, ["ONEDNN_MAX_CPU_ISA"], 1, initializer=_training_worker, initargs=(env,)))
    assert seen == (["AVX2"] if X86 else [None])
    assert "ONEDNN_MAX_CPU_ISA" not in os.environ  # the caller's own environment is left as it was


@pytest.fixture
def no_running_ray() -> Iterator[None]:
    """No Ray in this process, so that the search starts its own local cluster (and its workers'
    environment); the session's cluster (tests/nas/conftest.py) is started again afterwards."""
    import ray

    was_up = ray.is_initialized()
    if was_up:
        ray.shutdown()
    yield
    if was_up and not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")


@pytest.mark.skipif(not X86, reason="the AVX2 cap is for x86-64 CPUs")
def test_a_search_on_the_cpu_trains_its_candidates_channels_last_and_says_so(
    tmp_path: Path, no_isa_cap: pytest.MonkeyPatch, no_running_ray: None,
) -> None:
    from mlflow import MlflowClient

    from nas.driver import run_search

    cfg = stored_config(
        tmp_path, "+space=tiny", "target_ms=1.0", "data.max_train_samples=256", "data.max_val_samples=64",
        "train.epochs=1", "train.device=cpu", "latency.input_shape=[1,3,32,32]", "latency.measure.min_runs=10",
        "latency.measure.min_time_s=0.05", "latency.measure.max_time_s=0.5", "latency.measure.max_repeats=1",
        "latency.final_pass_top_k=0", "search.n_trials=2", "search.max_concurrent=2", "progress=false", "name=format",
    )
    result = run_search(cfg)
    runs = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_runs([result.experiment_id])
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == result.parent_run_id]
    assert len(children) == 2 and all(c.data.tags["status"] == "COMPLETED" for c in children)
    assert {c.data.tags["train_memory_format"] for c in children} == {"channels_last"}
    assert channels_last_on(TrainConfig(), torch.device("cpu")) is False  # the driver's own process is left alone


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_mixed_precision_and_channels_last_train_on_cuda() -> None:
    data = load_dataset(DataConfig(resolution=32, max_train_samples=256, max_val_samples=128))
    net = build(load_space("tiny").extremes()[0], num_classes=10)
    res = train_briefly(net, data, TrainConfig(epochs=1, amp="auto", channels_last="on"), torch.device("cuda"))
    assert math.isfinite(res[0].val_loss)


def test_the_recipe_is_seeded_end_to_end() -> None:
    data = load_dataset(DataConfig(resolution=16, max_train_samples=128, max_val_samples=64))
    arch = load_space("tiny").sample(np.random.default_rng(1))
    weights = []
    for _ in range(2):
        torch.manual_seed(0)
        net = build(arch, num_classes=10)
        train_briefly(net, data, TrainConfig(epochs=1, batch_size=32, augment="crop", warmup_epochs=0.5),
                      torch.device("cpu"))
        weights.append(torch.cat([p.detach().flatten() for p in net.parameters()]))
    assert torch.equal(weights[0], weights[1])
