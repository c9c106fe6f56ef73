"""One measurement slot per device, shared by every process on a node.

Why: a latency measured while another measurement (or other heavy work) runs on the same
device measures the contention, not the network. A multi-worker search runs several trials at
once on one node, so their measurements must take turns.

Design:

* A slot is an exclusive ``fcntl.flock`` on the file ``<slot_dir>/<key>.lock``, e.g.
  ``cpu.lock`` or ``cuda-0.lock``. Every process (Ray worker, CLI, benchmark) that measures on
  that device queues on the same file, so measurements of one device never overlap, while
  measurements of different devices (``cuda:0`` and ``cuda:1``) run in parallel.
* A GPU's key names the *physical* GPU, not the process's view of it: a process sees the GPUs
  listed in ``CUDA_VISIBLE_DEVICES`` renumbered from 0 (Ray sets that variable for each trial to
  the GPUs it assigned, so ``cuda:0`` of two trials can be two different GPUs), and CUDA numbers
  them fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (``nvidia-smi`` numbers them in PCI
  order). Indices can therefore name different GPUs in different processes; the GPU's UUID
  cannot. The key of ``cuda:N`` is ``cuda-GPU-<uuid>`` with the UUID CUDA reports for device N
  of this process (:func:`cuda_uuid`). Only where this process's torch cannot ask CUDA (a
  CPU-only torch build driving ONNX Runtime's GPU providers) is the key taken from
  ``CUDA_VISIBLE_DEVICES``: its entry N when set (``cuda-3``, or ``cuda-GPU-<uuid>`` for a
  UUID entry), else N (see :func:`slot_key`); give such processes UUIDs in
  ``CUDA_VISIBLE_DEVICES`` (``nvidia-smi -L`` lists them) so their keys match.
* The kernel releases the lock when its holder exits or dies, so a crashed trial never leaves
  a stale slot behind (a lock file that stays on disk is harmless: only the lock matters).
* ``slot_dir`` defaults to ``$LATNAS_SLOT_DIR`` or ``<system temp dir>/latnas-slots``; every
  process of one search must see the same directory (it must be on a local file system:
  ``flock`` is not reliable over NFS).
* Only measurements hold the slot, and training never takes it. Backends take it themselves
  (option ``slot=False`` to disable) and record the wait in ``LatencyResult.extra["slot_wait_s"]``:
  on the CPU around their warm-up and timed runs only (export and session creation happen
  before it is taken); on a GPU from preparation on, because engine builds and first runs
  autotune (TensorRT tactics, cuDNN benchmark mode, ONNX Runtime's CUDA algorithm search) and
  must not time their candidates while other work shares the GPU.
* The slot is re-entrant within one thread: code that already holds ``measurement_slot(dev)``
  may call a backend that takes the same slot without deadlocking.

Training and other heavy work: :func:`device_work` takes the same lock *shared*. Any number of
training steps run together, but none while a measurement holds the slot, so a measurement
never overlaps other trials' training on that device (on a CPU node, "the device" is the CPU).
Writer preference comes from a second lock file, the turnstile (``<key>.turnstile``): a waiting
measurement holds it, so new training steps queue behind the measurement, which waits only for
the steps already running. The search wraps each training step (and each evaluation pass) in
``device_work``; a trial's own training and measurement are sequential, so they never wait on
each other. Work that does not go through ``device_work`` (another program on the machine) is
not kept off: the CPU-share check of the timing protocol flags such measurements instead.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from latency_predictor.errors import ConfigError, MeasurementError

SLOT_DIR_ENV = "LATNAS_SLOT_DIR"
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
_DEVICE_RE = re.compile(r"cpu|cuda:\d+")
_VISIBLE_ENTRY_RE = re.compile(r"\d+|(GPU|MIG)-\S+")
_held = threading.local()


@dataclass(frozen=True)
class SlotTicket:
    """A held slot.

    Attributes:
        device: the device the slot guards (``cpu``, ``cuda:0``, ...).
        path: the lock file.
        waited_s: seconds spent queueing for the slot (0 when it was already held by this thread).
    """

    device: str
    path: Path
    waited_s: float


def default_slot_dir() -> Path:
    """``$LATNAS_SLOT_DIR`` if set, else ``<system temp dir>/latnas-slots``."""
    env = os.environ.get(SLOT_DIR_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / "latnas-slots"


def normalise_device(device: str) -> str:
    """Canonical device key: ``cpu`` or ``cuda:N`` (``cuda`` alone means ``cuda:0``).

    Raises:
        ConfigError: anything else.
    """
    d = device.strip().lower()
    if d == "cuda":
        d = "cuda:0"
    if not _DEVICE_RE.fullmatch(d):
        raise ConfigError(f"device must be 'cpu' or 'cuda:<index>', got {device!r}")
    return d


def cuda_uuid(index: int) -> str | None:
    """The UUID of CUDA device ``index`` of this process (``GPU-...`` or ``MIG-...``), as CUDA reports it.

    CUDA numbers devices after applying ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``, so
    this is the GPU the process's ``cuda:<index>`` really is. None where this torch sees no CUDA
    device (a CPU-only build, no driver) or fewer than ``index + 1``.

    Raises:
        MeasurementError: torch sees the device but cannot read its properties (e.g. in a
            process forked after CUDA was initialised).
    """
    import torch

    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    try:
        return _device_uuid(index)
    except RuntimeError as err:
        raise MeasurementError(f"cannot read the UUID of cuda:{index} to name its measurement slot: {err}") from None


@functools.cache
def _device_uuid(index: int) -> str:
    import torch

    uuid = str(torch.cuda.get_device_properties(index).uuid)
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def slot_key(device: str, visible: str | None = None, uuid: str | None = None) -> str:
    """The name of ``device``'s slot: ``cpu``, or ``cuda-<physical GPU>`` for ``cuda:N``.

    Args:
        device: ``cpu`` or ``cuda:N`` as this process sees it.
        visible: the value of ``CUDA_VISIBLE_DEVICES`` to apply (default: this process's).
        uuid: the UUID of ``cuda:N`` when known (:func:`slot_path` passes :func:`cuda_uuid`'s).

    Returns:
        ``cpu``; for ``cuda:N``, ``cuda-<uuid>`` when ``uuid`` is given, else
        ``cuda-<entry N of CUDA_VISIBLE_DEVICES>`` when the variable is set (as CUDA reads it:
        the list ends at the first entry that is neither an index nor a ``GPU-``/``MIG-``
        identifier), else ``cuda-N``.

    Raises:
        ConfigError: a malformed device, or ``cuda:N`` beyond the GPUs the variable makes visible.
    """
    d = normalise_device(device)
    if d == "cpu":
        return d
    index = int(d.split(":")[1])
    if visible is None:
        visible = os.environ.get(VISIBLE_ENV)
    if visible is None:
        return _safe_key(uuid or str(index))
    entries: list[str] = []
    for entry in (e.strip() for e in visible.split(",")):
        if not _VISIBLE_ENTRY_RE.fullmatch(entry):
            break
        entries.append(entry)
    if index >= len(entries):
        raise ConfigError(
            f"device {device!r} is not visible to this process: {VISIBLE_ENV}={visible!r} makes "
            f"{len(entries)} GPU(s) visible"
        )
    return _safe_key(uuid or entries[index])


def _safe_key(gpu: str) -> str:
    return "cuda-" + re.sub(r"[^A-Za-z0-9_.-]", "_", gpu)


def slot_path(device: str, slot_dir: str | Path | None = None) -> Path:
    """The lock file of ``device``'s slot (named by :func:`slot_key`, with the GPU's UUID where CUDA gives it)."""
    base = Path(slot_dir) if slot_dir is not None else default_slot_dir()
    d = normalise_device(device)
    uuid = cuda_uuid(int(d.split(":")[1])) if d != "cpu" else None
    return base / f"{slot_key(d, uuid=uuid)}.lock"


def _open(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise ConfigError(f"cannot use slot directory {str(path.parent)!r}: {err.strerror}") from None


def _turnstile(path: Path) -> Path:
    return path.with_suffix(".turnstile")


@contextmanager
def measurement_slot(
    device: str, slot_dir: str | Path | None = None, timeout_s: float | None = None
) -> Iterator[SlotTicket]:
    """Hold ``device``'s measurement slot for the duration of the ``with`` block.

    The slot is exclusive: no other measurement and no :func:`device_work` (training) of any
    process runs on the device while it is held. A waiting measurement first takes the
    turnstile, so new training steps queue behind it and it waits at most for the steps
    already running.

    Args:
        device: ``cpu`` or ``cuda:N``.
        slot_dir: directory of the lock files (default :func:`default_slot_dir`).
        timeout_s: give up after this many seconds of waiting (``None``: wait as long as needed).

    Yields:
        A :class:`SlotTicket` saying how long the wait was.

    Raises:
        ConfigError: a malformed device, or a slot directory that cannot be created.
        MeasurementError: ``timeout_s`` passed before the slot came free.
    """
    d = normalise_device(device)
    path = slot_path(d, slot_dir)
    counts = _counts()
    key = str(path)
    if counts.get(key, 0) > 0:
        counts[key] += 1
        try:
            yield SlotTicket(d, path, 0.0)
        finally:
            counts[key] -= 1
        return
    fd = _open(path)
    try:
        tfd = _open(_turnstile(path))
        try:
            t0 = time.perf_counter()
            _acquire(tfd, d, timeout_s, fcntl.LOCK_EX)
            try:
                left = None if timeout_s is None else max(0.0, timeout_s - (time.perf_counter() - t0))
                _acquire(fd, d, left, fcntl.LOCK_EX)
            finally:
                # Holding the main lock now (or having failed): let the next one queue.
                fcntl.flock(tfd, fcntl.LOCK_UN)
        finally:
            os.close(tfd)
        waited = time.perf_counter() - t0
        counts[key] = 1
        try:
            yield SlotTicket(d, path, waited)
        finally:
            counts[key] = 0
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def device_work(device: str, slot_dir: str | Path | None = None) -> Iterator[None]:
    """Mark heavy non-measurement work (a training step) on ``device`` for the block's duration.

    Any number of processes may do device work at once (a shared lock on the slot), but never
    while a measurement holds the slot, and a waiting measurement stops new work from starting.
    Wrap short units of work (one training step), so a measurement waits only for the steps
    already running. Inside a measurement slot held by this thread it is a no-op.

    Raises:
        ConfigError: a malformed device, or a slot directory that cannot be created.
    """
    d = normalise_device(device)
    path = slot_path(d, slot_dir)
    if _counts().get(str(path), 0) > 0:
        yield
        return
    fd = _open(path)
    try:
        tfd = _open(_turnstile(path))
        try:
            fcntl.flock(tfd, fcntl.LOCK_EX)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
            finally:
                fcntl.flock(tfd, fcntl.LOCK_UN)
        finally:
            os.close(tfd)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _counts() -> dict[str, int]:
    counts: dict[str, int] | None = getattr(_held, "counts", None)
    if counts is None:
        counts = {}
        _held.counts = counts
    return counts


def _acquire(fd: int, device: str, timeout_s: float | None, mode: int) -> None:
    if timeout_s is None:
        fcntl.flock(fd, mode)
        return
    deadline = time.perf_counter() + timeout_s
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if time.perf_counter() >= deadline:
            raise MeasurementError(f"measurement slot of {device} still busy after {timeout_s:g} s")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
