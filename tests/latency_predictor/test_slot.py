"""The per-device measurement slot keeps measurements of one device from overlapping."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from latency_predictor import ConfigError, MeasurementError
from latency_predictor.measurement.backends import MeasuredBackend, OnnxRuntimeBackend, Prepared
from latency_predictor.measurement.slot import cuda_uuid, measurement_slot, normalise_device, slot_key, slot_path
from search_spaces import Arch
from tests.latency_predictor.conftest import FAST, TINY_SHAPE, run_forked

HOLD_S = 0.3


def _hold(slot_dir: str, device: str, out: mp.Queue) -> None:  # type: ignore[type-arg]
    with measurement_slot(device, slot_dir) as ticket:
        start = time.time()
        time.sleep(HOLD_S)
        end = time.time()
    out.put((start, end, ticket.waited_s))


def _run_two(slot_dir: Path, devices: tuple[str, str], target: Any = _hold) -> list[tuple[float, float, float]]:
    return sorted(run_forked([(target, (str(slot_dir), d)) for d in devices]))


def _meet(slot_dir: str, device: str, env: dict[str, str], mine: Any, other: Any,
          out: mp.Queue) -> None:  # type: ignore[type-arg]
    # Inside its slot, each process says it is there and waits for the other to be inside its own:
    # both get there only if the two slots are held at the same time.
    os.environ.update(env)
    with measurement_slot(device, slot_dir):
        mine.set()
        out.put(other.wait(timeout=20))


def _held_together(slot_dir: Path, devices: tuple[str, str], visible: tuple[str, str] | None = None) -> list[bool]:
    envs = [{"CUDA_VISIBLE_DEVICES": v} for v in visible] if visible else [{}, {}]
    return run_forked([(_meet, (str(slot_dir), d, env)) for d, env in zip(devices, envs, strict=True)],
                      rendezvous=True)


def test_two_processes_on_one_device_take_turns(slot_dir: Path) -> None:
    (_, e1, _), (s2, _, w2) = _run_two(slot_dir, ("cpu", "cpu"))
    assert s2 >= e1 - 0.01, "the second measurement started before the first released the slot"
    assert w2 > 0.0, "the second measurement did not wait for the slot"


def test_different_devices_run_in_parallel(slot_dir: Path) -> None:
    assert _held_together(slot_dir, ("cuda:0", "cuda:1")) == [True, True]


def test_busy_slot_times_out_and_is_reentrant_in_one_thread(slot_dir: Path) -> None:
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            with measurement_slot("cpu", slot_dir, timeout_s=0.05):
                pass
        except MeasurementError as err:
            errors.append(err)
        with measurement_slot("cuda:0", slot_dir, timeout_s=0.05):
            pass

    with measurement_slot("cpu", slot_dir) as outer, measurement_slot("cpu", slot_dir) as inner:
        assert inner.waited_s == 0.0 and inner.path == outer.path == slot_dir / "cpu.lock"
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    assert len(errors) == 1 and "still busy" in str(errors[0])
    with measurement_slot("cpu", slot_dir, timeout_s=0.05) as again:  # released on exit
        assert again.device == "cpu"


def test_backend_records_its_wait_for_the_slot(tiny_arch: Arch, slot_dir: Path) -> None:
    held = threading.Event()

    def holder() -> None:
        with measurement_slot("cpu", slot_dir):
            held.set()
            time.sleep(HOLD_S)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(5)
    r = OnnxRuntimeBackend(TINY_SHAPE, measure=FAST, slot_dir=slot_dir).measure(tiny_arch)
    t.join()
    assert r.extra["slot_wait_s"] > 0.0
    r = OnnxRuntimeBackend(TINY_SHAPE, measure=FAST, slot=False).measure(tiny_arch)
    assert r.extra["slot_wait_s"] is None


def test_device_names() -> None:
    assert normalise_device("CUDA") == "cuda:0" and normalise_device("cuda:3") == "cuda:3"
    assert slot_path("cuda:1", "/x").name == "cuda-1.lock"
    for bad in ("gpu", "cuda:", "cuda:a", "cpu0"):
        with pytest.raises(ConfigError, match="device"):
            normalise_device(bad)


def _hold_visible(slot_dir: str, visible: str, out: mp.Queue) -> None:  # type: ignore[type-arg]
    # What Ray does for a trial with one GPU: it shows the process only that GPU, as cuda:0.
    os.environ["CUDA_VISIBLE_DEVICES"] = visible
    _hold(slot_dir, "cuda:0", out)


def test_cuda0_of_two_trials_on_different_gpus_is_measured_in_parallel(slot_dir: Path) -> None:
    assert _held_together(slot_dir, ("cuda:0", "cuda:0"), visible=("1", "2")) == [True, True]
    assert {p.name for p in slot_dir.glob("*.lock")} == {"cuda-1.lock", "cuda-2.lock"}


def test_cuda0_of_two_trials_sharing_a_gpu_takes_turns(slot_dir: Path) -> None:
    (_, e1, _), (s2, _, w2) = _run_two(slot_dir, ("3", "3"), _hold_visible)
    assert s2 >= e1 - 0.01 and w2 > 0.0


def test_slot_key_names_the_physical_gpu(monkeypatch: pytest.MonkeyPatch, slot_dir: Path) -> None:
    assert slot_key("cuda:0", "3") == "cuda-3" and slot_key("cuda:1", "2, 5") == "cuda-5"
    assert slot_key("cuda:0", "GPU-8f0e1c2a-77b4") == "cuda-GPU-8f0e1c2a-77b4"
    assert slot_key("cuda:0", "MIG-GPU-8f0e/1/0") == "cuda-MIG-GPU-8f0e_1_0"
    assert slot_key("cpu", "3") == "cpu"
    for device, visible in (("cuda:1", "0"), ("cuda:0", ""), ("cuda:1", "0,-1,2")):  # CUDA stops at "-1"
        with pytest.raises(ConfigError, match="not visible to this process"):
            slot_key(device, visible)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6")
    assert slot_path("cuda:0", slot_dir).name == "cuda-6.lock"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert slot_path("cuda:2", slot_dir).name == "cuda-2.lock"


def test_a_gpu_is_keyed_by_its_uuid_whatever_index_a_process_gives_it() -> None:
    # One GPU as two processes see it: index 1 of "0,1" in one, index 0 of "1" in the other,
    # and index 0 in a third whose CUDA orders devices differently. Its UUID names it in all three.
    uuid = "GPU-8f0e1c2a-77b4-4d0e-9a51-0c2d7e1f3b6a"
    keys = {slot_key("cuda:1", "0,1", uuid=uuid), slot_key("cuda:0", "1", uuid=uuid), slot_key("cuda:0", uuid=uuid)}
    assert keys == {"cuda-GPU-8f0e1c2a-77b4-4d0e-9a51-0c2d7e1f3b6a"}
    with pytest.raises(ConfigError, match="not visible"):  # the variable still bounds the index
        slot_key("cuda:2", "0,1", uuid=uuid)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the key is its UUID")
def test_without_cuda_in_torch_the_key_falls_back_to_the_visible_entry(
    monkeypatch: pytest.MonkeyPatch, slot_dir: Path
) -> None:
    assert cuda_uuid(0) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f0e1c2a")
    assert slot_path("cuda:0", slot_dir).name == "cuda-GPU-8f0e1c2a.lock"


class _SlotProbe(MeasuredBackend):
    """A backend whose preparation only looks whether its device's slot is held (from another thread)."""

    name = "probe"

    def __init__(self, device: str, slot_dir: Path) -> None:
        super().__init__(TINY_SHAPE, "fp32", device, FAST, True, slot_dir, 10, False)
        self.slot_held_while_preparing: bool | None = None

    def _prepare(self, arch: Arch, net: Any, input_shape: tuple[int, ...]) -> Prepared:
        self.slot_held_while_preparing = _held_elsewhere(self.device, self.slot_dir)
        return Prepared(run_once=lambda: sum(range(100)))

    def _backend_environment(self) -> dict[str, str]:
        return {}


def _held_elsewhere(device: str, slot_dir: Any) -> bool:
    busy: list[bool] = []

    def probe() -> None:
        try:
            with measurement_slot(device, slot_dir, timeout_s=0.05):
                busy.append(False)
        except MeasurementError:
            busy.append(True)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return busy[0]


def test_gpu_backends_hold_the_slot_while_preparing_and_cpu_backends_do_not(tiny_arch: Arch, slot_dir: Path) -> None:
    # Preparing on a GPU autotunes (TensorRT tactics, cuDNN benchmark): other work on the GPU would skew it.
    on_gpu = _SlotProbe("cuda:0", slot_dir)
    r = on_gpu.measure(tiny_arch)
    assert on_gpu.slot_held_while_preparing is True and r.extra["slot_held_for"] == "preparation and timing"
    on_cpu = _SlotProbe("cpu", slot_dir)
    r = on_cpu.measure(tiny_arch)
    assert on_cpu.slot_held_while_preparing is False and r.extra["slot_held_for"] == "timing"
