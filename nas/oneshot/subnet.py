"""A subnet of a trained supernet: the checkpoint, what it is for, and a subnet's accuracy from it.

A supernet checkpoint (``supernet.pt``, written by ``python -m nas.supernet`` after every epoch)
is one file read with ``torch.load(weights_only=True)``, so loading it cannot run code. Besides
the weights (and, for resuming, the optimiser's state) it records what the supernet is *for*
(:class:`SupernetTarget`): the space by name and by a hash of its definition, the layout version
of :class:`~search_spaces.supernet.Supernet`, the classifier's width and classes, the input
resolution and channels, and the data split it trained on. A checkpoint used in another setting
is refused with :class:`~nas.core.errors.SupernetMismatchError` naming every difference, before
any candidate is evaluated; among them a validation split that overlaps the supernet's training
images (same images, another ``val_fraction`` or ``seed``), which would flatter every subnet.

A subnet's accuracy (:func:`subnet_accuracy`): extract the subnet as the builder's network with
the supernet's weights, recalibrate its BatchNorm statistics on a fixed, seeded set of
``bn_batches x batch_size`` training images (shared BatchNorm statistics fit no single subnet),
and validate it on the validation split, with the inputs normalised as the supernet's training
normalised them. The supernet is loaded once per process and kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import pickle
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from latency_predictor.prediction.target import space_digest
from nas.accuracy.training import evaluate, recalibrate_batchnorm
from nas.core.config import DataConfig
from nas.core.errors import SupernetError, SupernetMismatchError
from nas.data import ProxyData
from search_spaces import Arch, SearchSpace
from search_spaces.builder import Net
from search_spaces.supernet import SUPERNET_VERSION, Supernet

FORMAT = "latnas-supernet"
FORMAT_VERSION = 1
CHECKPOINT_NAME = "supernet.pt"


@dataclass(frozen=True)
class SupernetTarget:
    """The setting a supernet's accuracy estimates are valid in.

    Attributes:
        space: the space's name.
        space_digest: a hash of the space's definition (its choices).
        supernet_version: the layout version of the supernet's weights.
        num_classes: the classifier's width.
        classes: the class names, index = label.
        resolution: the input images' side.
        in_chans: the input channels.
        data_source: where the images came from.
        val_fraction: the share of the images held out for validation (None: not known here).
        data_seed: the seed of that split (None: not known here).
    """

    space: str
    space_digest: str
    supernet_version: int
    num_classes: int
    classes: tuple[str, ...]
    resolution: int
    in_chans: int
    data_source: str
    val_fraction: float | None = None
    data_seed: int | None = None

    @classmethod
    def of(cls, space: SearchSpace, data: ProxyData, data_cfg: DataConfig | None = None,
           num_classes: int | None = None) -> SupernetTarget:
        """The setting of ``space`` on ``data`` (split by ``data_cfg`` when given)."""
        return cls(space.name, space_digest(space), SUPERNET_VERSION,
                   data.num_classes if num_classes is None else num_classes, tuple(data.classes), data.resolution, 3,
                   str(data.source), data_cfg.val_fraction if data_cfg else None, data_cfg.seed if data_cfg else None)

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (the checkpoint is read with ``weights_only=True``)."""
        d = dataclasses.asdict(self)
        d["classes"] = list(self.classes)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SupernetTarget:
        """The inverse of :meth:`to_dict`.

        Raises:
            SupernetError: a field is missing.
        """
        try:
            return cls(**{**d, "classes": tuple(d["classes"])})
        except (KeyError, TypeError) as err:
            raise SupernetError(f"the checkpoint's target is incomplete ({err})") from None

    def mismatches(self, expected: SupernetTarget) -> list[str]:
        """Every difference between this checkpoint's target and ``expected`` (the setting "here")."""
        there = "in the checkpoint"
        out = []
        if self.space != expected.space:
            out.append(f"space {expected.space!r} here, {self.space!r} {there}")
        elif self.space_digest != expected.space_digest:
            out.append(f"space {self.space!r} has a different definition here than {there} (its choices changed)")
        if self.supernet_version != expected.supernet_version:
            out.append(f"supernet layout version {expected.supernet_version} here, {self.supernet_version} {there}")
        if self.num_classes != expected.num_classes:
            out.append(f"num_classes {expected.num_classes} here, {self.num_classes} {there}")
        elif self.classes != expected.classes:
            out.append(f"classes {list(expected.classes)} here, {list(self.classes)} {there}")
        if self.resolution != expected.resolution:
            out.append(f"resolution {expected.resolution} here, {self.resolution} {there}")
        if self.in_chans != expected.in_chans:
            out.append(f"input channels {expected.in_chans} here, {self.in_chans} {there}")
        split, theirs = (expected.val_fraction, expected.data_seed), (self.val_fraction, self.data_seed)
        if (self.data_source == expected.data_source and None not in (*split, *theirs) and split != theirs):
            out.append(f"validation split val_fraction={split[0]:g} seed={split[1]} here, val_fraction={theirs[0]:g} "
                       f"seed={theirs[1]} {there}, of the same images ({self.data_source}): the supernet trained on "
                       "part of this validation split")
        return out


# ---------------------------------------------------------------------- the file


def write_checkpoint(path: Path, payload: Mapping[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically: a reader (or a process killed mid-write) sees the
    previous checkpoint or the new one, never a partial file.

    Raises:
        SupernetError: the file cannot be written.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            torch.save(dict(payload), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise SupernetError(f"cannot write the supernet checkpoint {path}: {err.strerror or err}") from None


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint at ``path`` (tensors on the CPU), checked to be a LatNAS supernet's.

    Raises:
        SupernetError: no such file, not readable, not a supernet checkpoint, or of another format version.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise SupernetError(f"supernet checkpoint {str(p)!r} does not exist (train one with python -m nas.supernet)")
    try:
        payload = torch.load(p, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise SupernetError(f"cannot read supernet checkpoint {str(p)!r}: {first[:300]}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise SupernetError(f"{str(p)!r} is not a LatNAS supernet checkpoint (made by python -m nas.supernet)")
    if payload.get("format_version") != FORMAT_VERSION:
        raise SupernetError(f"{str(p)!r} has checkpoint format version {payload.get('format_version')!r}; this "
                            f"LatNAS reads version {FORMAT_VERSION}")
    return payload


def check_target(payload: Mapping[str, Any], expected: SupernetTarget, path: str | Path) -> SupernetTarget:
    """The checkpoint's target, when it matches ``expected``.

    Raises:
        SupernetMismatchError: naming every difference.
    """
    target = SupernetTarget.from_dict(payload["target"])
    diffs = target.mismatches(expected)
    if diffs:
        raise SupernetMismatchError(f"supernet checkpoint {str(path)!r} was made for another setting: "
                                    + "; ".join(diffs))
    return target


def checkpoint_space(payload: Mapping[str, Any]) -> SearchSpace:
    """The space the checkpoint's supernet covers, rebuilt from the definition it records.

    Raises:
        SupernetError: the definition does not hash to the recorded digest (the file was edited).
        SearchSpaceError: the definition is invalid.
    """
    space = SearchSpace.from_dict(payload["space_definition"], source="<supernet checkpoint>")
    if space_digest(space) != payload["target"]["space_digest"]:
        raise SupernetError("the checkpoint's space definition does not match its recorded digest (edited or "
                            "corrupted)")
    return space


def data_config_of(path: str | Path) -> DataConfig:
    """The data settings the checkpoint's supernet trained with (its validation split is the one to use).

    Raises:
        SupernetError: the checkpoint cannot be read.
    """
    return DataConfig(**read_checkpoint(path)["data_config"])


def normalised_as_supernet(data: ProxyData, path: str | Path) -> ProxyData:
    """``data`` normalised with the mean and standard deviation the checkpoint's supernet trained with.

    Raises:
        SupernetError: the checkpoint cannot be read.
    """
    norm = read_checkpoint(path)["normalisation"]
    return dataclasses.replace(data, mean=tuple(norm["mean"]), std=tuple(norm["std"]))


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------- a loaded supernet


@dataclass
class LoadedSupernet:
    """A supernet ready to give subnets.

    Attributes:
        path: the checkpoint.
        sha256: its digest.
        target: what it is for.
        net: the supernet (evaluation mode).
        mean: the per-channel mean its inputs were normalised with.
        std: the per-channel standard deviation.
        epochs: epochs it was trained.
        train_seconds: the wall time of its training (all processes' time, one clock).
    """

    path: Path
    sha256: str
    target: SupernetTarget
    net: Supernet
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    epochs: int
    train_seconds: float
    _normalised: dict[int, tuple[ProxyData, ProxyData]] = dataclasses.field(default_factory=dict, repr=False)

    def normalised_like_training(self, data: ProxyData) -> ProxyData:
        """``data`` normalised with this supernet's training statistics (not its own); the same
        object for the same ``data``, so what is cached per dataset stays cached."""
        hit = self._normalised.get(id(data))
        if hit is None or hit[0] is not data:
            hit = (data, dataclasses.replace(data, mean=self.mean, std=self.std))
            self._normalised.clear()
            self._normalised[id(data)] = hit
        return hit[1]


_LOADED: dict[tuple[Any, ...], LoadedSupernet] = {}


def load_supernet(path: str | Path, space: SearchSpace, expected: SupernetTarget,
                  device: torch.device | str = "cpu") -> LoadedSupernet:
    """The supernet of the checkpoint at ``path`` for ``space``, checked against ``expected``.

    Kept per process (a trial worker loads it once): the same file, unchanged, is not read again.

    Raises:
        SupernetError: the checkpoint cannot be read.
        SupernetMismatchError: it was made for another setting (naming every difference).
    """
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        read_checkpoint(p)  # raises the missing-file error
    st = p.stat()
    key = (str(p), st.st_mtime_ns, st.st_size, expected, str(device))
    if key in _LOADED:
        return _LOADED[key]
    payload = read_checkpoint(p)
    target = check_target(payload, expected, p)
    net = Supernet(space, target.num_classes, target.in_chans)
    try:
        net.load_state_dict(payload["model"])
    except RuntimeError as err:
        raise SupernetError(f"{str(p)!r}: the weights do not fit the supernet of {space.name!r}: "
                            f"{str(err).splitlines()[0][:300]}") from None
    norm = payload["normalisation"]
    mean, std = (cast(tuple[float, float, float], tuple(float(v) for v in norm[k])) for k in ("mean", "std"))
    loaded = LoadedSupernet(p, file_digest(p), target, net.to(device).eval(), mean, std, int(payload["epoch"]),
                            float(payload.get("train_seconds", math.nan)))
    _LOADED.clear()  # one supernet per process: they can be large
    _LOADED[key] = loaded
    return loaded


def check_supernet(path: str | Path, space: SearchSpace, data: ProxyData, data_cfg: DataConfig) -> LoadedSupernet:
    """Load the checkpoint for ``space`` on ``data`` split by ``data_cfg``: the check a command makes
    before any candidate is evaluated.

    Raises:
        SupernetError: the checkpoint cannot be read.
        SupernetMismatchError: it was made for another setting (naming every difference).
    """
    return load_supernet(path, space, SupernetTarget.of(space, data, data_cfg))


# ---------------------------------------------------------------------- a subnet's accuracy


_IMAGES: dict[str, tuple[ProxyData, int, int, str, torch.Tensor]] = {}


def _recalibration_images(data: ProxyData, n: int, seed: int, device: torch.device | str) -> torch.Tensor:
    # The same seeded images for every candidate of a process (a fair comparison, read once).
    cached = _IMAGES.get("last")
    if cached is not None and cached[0] is data and cached[1:4] == (n, seed, str(device)):
        return cached[4]
    x, _ = data.sample_train(n, seed, device)
    _IMAGES["last"] = (data, n, seed, str(device), x)
    return x


@dataclass(frozen=True)
class SubnetResult:
    """A subnet's validation figures.

    Attributes:
        accuracy: validation accuracy in [0, 1].
        val_loss: mean validation cross-entropy.
        seconds: extraction, recalibration and validation.
        recalibration_images: training images the BatchNorm statistics came from.
    """

    accuracy: float
    val_loss: float
    seconds: float
    recalibration_images: int


def recalibrated_subnet(supernet: Supernet, arch: Arch, data: ProxyData, bn_batches: int, batch_size: int,
                        device: torch.device | str = "cpu", seed: int = 0) -> tuple[Net, int]:
    """Subnet ``arch`` extracted from ``supernet`` onto ``device``, BatchNorm recalibrated on
    ``bn_batches x batch_size`` seeded training images of ``data`` (normalised as the supernet's
    training normalised them); and how many images that was.

    Raises:
        OutOfSpaceError: ``arch`` is not in the supernet's space.
    """
    net = supernet.extract(arch).to(device)
    images = data.normalise(_recalibration_images(data, bn_batches * batch_size, seed, device))
    recalibrate_batchnorm(net, (images[i : i + batch_size] for i in range(0, len(images), batch_size)))
    return net, len(images)


def evaluate_subnet(supernet: Supernet, arch: Arch, data: ProxyData, bn_batches: int, batch_size: int,
                    device: torch.device | str = "cpu", seed: int = 0) -> SubnetResult:
    """The validation accuracy of ``arch``'s subnet of ``supernet`` on ``data`` (normalised as the
    supernet's training normalised them): extracted, recalibrated, validated.

    Raises:
        OutOfSpaceError: ``arch`` is not in the supernet's space.
    """
    t0 = time.perf_counter()
    was_training = supernet.training
    net, n = recalibrated_subnet(supernet, arch, data, bn_batches, batch_size, device, seed)
    acc, loss = evaluate(net, data, torch.device(device))
    supernet.train(was_training)
    return SubnetResult(acc, loss, time.perf_counter() - t0, n)


def subnet_accuracy(loaded: LoadedSupernet, arch: Arch, data: ProxyData, bn_batches: int, batch_size: int,
                    device: torch.device | str = "cpu", seed: int = 0) -> SubnetResult:
    """The validation accuracy of ``arch``'s subnet of a loaded supernet on ``data`` (see the module's text).

    Raises:
        OutOfSpaceError: ``arch`` is not in the supernet's space.
    """
    return evaluate_subnet(loaded.net, arch, loaded.normalised_like_training(data), bn_batches, batch_size, device,
                           seed)


def supernet_init(arch: Arch, path: str | Path, space: SearchSpace | None, data: ProxyData, data_cfg: DataConfig,
                  num_classes: int, bn_batches: int, batch_size: int, seed: int = 0) -> tuple[Net, dict[str, Any]]:
    """``arch``'s network with the supernet's weights (BatchNorm recalibrated), to export or fine-tune,
    and what to report about it (validation accuracy before any fine-tuning, the preprocessing).

    ``space``: the space the candidate was searched in (None: the checkpoint's own).

    Raises:
        SupernetError: the checkpoint cannot be read.
        SupernetMismatchError: it was made for another setting (naming every difference).
        OutOfSpaceError: ``arch`` is not in the supernet's space.
    """
    payload = read_checkpoint(path)
    own = checkpoint_space(payload)
    own.validate(arch)
    loaded = load_supernet(path, space or own, SupernetTarget.of(space or own, data, data_cfg, num_classes))
    normed = loaded.normalised_like_training(data)
    net, n = recalibrated_subnet(loaded.net, arch, normed, bn_batches, batch_size, "cpu", seed)
    acc, loss = evaluate(net, normed, torch.device("cpu"))
    info = {"init": "supernet", "checkpoint": str(loaded.path), "sha256": loaded.sha256, "epochs": loaded.epochs,
            "bn_recalibration": {"batches": bn_batches, "batch_size": batch_size, "images": n},
            "accuracy": acc, "val_loss": loss, "dataset": data.summary(),
            "preprocessing": {"scale": 1 / 255, "mean": list(loaded.mean), "std": list(loaded.std),
                              "resolution": data.resolution, "classes": list(data.classes)}}
    return net, info
