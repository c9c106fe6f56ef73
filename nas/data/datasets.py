"""Proxy-task datasets, loaded once in the driver and shipped to every trial.

Nothing is ever downloaded. Three sources:

* ``digits``: scikit-learn's handwritten digits (1,797 8x8 images, 10 classes), which ship
  inside the scikit-learn package; upsampled to ``resolution`` and repeated to 3 channels. A
  demonstration proxy: small enough for a first search in minutes, too small to rank networks.
* ``cifar10``: a CIFAR-10 folder in its standard python format (``data_batch_1`` ...
  ``data_batch_5``) that the user already has on local disk, given as ``data.path``. The
  batches are pickles: they are read with an unpickler that accepts only plain containers and
  numpy arrays, so a tampered file cannot run code. Its test batch is not read.
* ``image_folder``: ``<path>/<class name>/<image files>``, where ``data.path`` is a folder or a
  ``.tar``/``.tar.gz`` archive of one (:mod:`nas.data.images`): decoded in parallel once and
  cached by content and resolution (:mod:`nas.data.cache`), so the next search starts in seconds.

Every source is split into training and validation images here, seeded and stratified by class:
a search validates on images carved from the training data, never on a test split, which stays
the user's. Images are kept as ``uint8`` arrays ``(N, 3, R, R)`` (compact enough for Ray's object
store even for CIFAR-10) with per-channel mean and standard deviation of the training split. An
image folder larger than ``data.stream_above_mb`` (or with ``data.stream=always``) is not loaded: a
:class:`~nas.data.stream.StreamedDataset` lists its files and each trial streams them from disk.

Both kinds offer the same interface: ``train_batches``, ``val_batches``, ``sample_train``,
``normalise``, ``take_train``, ``summary`` and the sizes.
"""

from __future__ import annotations

import codecs
import logging
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from nas.core.config import DataConfig
from nas.core.errors import DataError
from nas.data import cache
from nas.data.images import ImageList, decode_all, decode_image, is_archive, read_bytes, report_skipped, scan
from nas.data.stream import StreamedDataset, extracted_folder, normalise_uint8

log = logging.getLogger(__name__)

CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_STAT_SAMPLE = 2000  # images the mean and std of a streamed dataset are estimated from


@dataclass(frozen=True)
class Dataset:
    """A classification proxy task held in memory, split into training and validation images.

    Attributes:
        name: ``digits``, ``cifar10`` or ``image_folder``.
        source: where the images came from (for the record).
        x_train: ``uint8`` images ``(N, 3, R, R)``.
        y_train: ``int64`` labels ``(N,)``.
        x_val: ``uint8`` validation images.
        y_val: ``int64`` validation labels.
        classes: class names, index = label.
        mean: per-channel mean of ``x_train`` scaled to [0, 1].
        std: per-channel standard deviation of ``x_train`` scaled to [0, 1].
        mirror_invariant: whether a mirrored image shows the same class (horizontal flips are a
            valid augmentation); digits are not.
        skipped: how many files of the source were skipped as unreadable.
    """

    name: str
    source: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    classes: tuple[str, ...]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    mirror_invariant: bool = True
    skipped: int = 0

    streamed = False
    images = True

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self.classes)

    @property
    def resolution(self) -> int:
        """Image side length in pixels."""
        return int(self.x_train.shape[-1])

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """One image's shape as the network takes it: ``(3, R, R)``."""
        return (3, self.resolution, self.resolution)

    @property
    def n_train(self) -> int:
        """Training images."""
        return len(self.y_train)

    @property
    def n_val(self) -> int:
        """Validation images."""
        return len(self.y_val)

    @staticmethod
    def _tensors(x: np.ndarray, y: np.ndarray, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
        # Copies: arrays from Ray's object store are read-only.
        return (torch.tensor(x, dtype=torch.uint8, device=device),
                torch.tensor(y, dtype=torch.int64, device=device))

    def train_batches(self, batch_size: int, rng: np.random.Generator,
                      device: torch.device | str = "cpu") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch of ``uint8`` training batches in a random order (``rng``), with their labels."""
        order = rng.permutation(self.n_train)
        for i in range(0, self.n_train, batch_size):
            idx = np.sort(order[i : i + batch_size])
            yield self._tensors(self.x_train[idx], self.y_train[idx], device)

    def val_batches(self, batch_size: int, device: torch.device | str = "cpu") -> Iterator[
            tuple[torch.Tensor, torch.Tensor]]:
        """The validation split in ``uint8`` batches, in order."""
        for i in range(0, self.n_val, batch_size):
            yield self._tensors(self.x_val[i : i + batch_size], self.y_val[i : i + batch_size], device)

    def sample_train(self, n: int, seed: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` training images chosen with ``seed`` (``uint8``), and their labels."""
        idx = np.sort(np.random.default_rng(seed).permutation(self.n_train)[: min(n, self.n_train)])
        return self._tensors(self.x_train[idx], self.y_train[idx], device)

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """``uint8`` images as normalised ``float32`` (per-channel mean and standard deviation)."""
        return normalise_uint8(x, self.mean, self.std)

    def take_train(self, n: int, seed: int) -> Dataset:
        """The same task with ``n`` training images chosen with ``seed`` (all when ``n`` is larger)."""
        if n >= self.n_train:
            return self
        idx = np.sort(np.random.default_rng(seed).permutation(self.n_train)[:n])
        return replace(self, x_train=self.x_train[idx], y_train=self.y_train[idx])

    def shard(self, rank: int, world: int) -> Dataset:
        """Training images ``rank``, ``rank + world``, ... (one process's share in data-parallel
        training); the validation split whole."""
        return replace(self, x_train=self.x_train[rank::world], y_train=self.y_train[rank::world])

    def summary(self) -> dict[str, Any]:
        """Sizes and source, for the search record."""
        return {
            "name": self.name, "source": self.source, "train": self.n_train, "val": self.n_val,
            "classes": self.num_classes, "resolution": self.resolution,
        }


ProxyData = Dataset | StreamedDataset
"""A proxy task in memory or streamed from disk: the same interface."""


def load_dataset(cfg: DataConfig) -> ProxyData:
    """Load and split the proxy task described by ``cfg``.

    Raises:
        DataError: the path is missing or unreadable, the files are not in the expected layout,
            or too many of them are not readable images.
    """
    if cfg.name == "image_folder":
        return _image_folder(cfg)
    if cfg.name == "digits":
        x, y, classes, source = _digits(cfg.resolution)
    elif cfg.name == "cifar10":
        x, y, classes, source = _cifar10(_existing(cfg.path, folder=True), cfg.resolution)
    elif cfg.name == "custom":
        raise DataError(f"data=custom ({cfg.fn}) is the user's own data, which only a search takes "
                        "(nas.data.load_task); this command needs image data: choose digits, cifar10 or image_folder")
    else:
        raise DataError(f"data.name: unknown dataset {cfg.name!r}; choose digits, cifar10 or image_folder")
    return _in_memory(cfg, x, y, classes, source)


def _in_memory(cfg: DataConfig, x: np.ndarray, y: np.ndarray, classes: tuple[str, ...], source: str,
               skipped: int = 0) -> Dataset:
    tr, va = split_indices(y, cfg.val_fraction, cfg.seed)
    tr, va = _subsample(tr, cfg.max_train_samples, cfg.seed), _subsample(va, cfg.max_val_samples, cfg.seed)
    x_tr, x_va = np.ascontiguousarray(x[tr]), np.ascontiguousarray(x[va])
    mean, std = _stats(x_tr)
    return Dataset(cfg.name, source, x_tr, y[tr].astype(np.int64), x_va, y[va].astype(np.int64), classes, mean, std,
                   cfg.mirror_invariant, skipped)


# ---------------------------------------------------------------------- image folders and archives


def _image_folder(cfg: DataConfig) -> ProxyData:
    source = _existing(cfg.path, folder=False)
    images = scan(source)
    if _streams(cfg, len(images)):
        return _streamed(cfg, images)
    entry = cache.entry_for(source, cfg.resolution, cfg.cache_dir)
    hit = entry.load()
    if hit is not None:
        x, y, info = hit
        skipped = list(info.get("skipped", []))
        log.info("data: %d images of %s from the cache (%s)", len(y), source, entry.arrays)
    else:
        log.info("data: decoding %d images of %s at %dx%d (once; cached in %s)", len(images), source,
                 cfg.resolution, cfg.resolution, entry.folder)
        x, y, skipped = decode_all(images, cfg.resolution, cfg.workers, cfg.max_bad_fraction)
        entry.store(x, y, {"source": str(source), "classes": list(images.classes), "skipped": skipped,
                           "resolution": cfg.resolution})
    if skipped and len(skipped) / max(len(y) + len(skipped), 1) > cfg.max_bad_fraction:
        first = ", ".join(skipped[:5])
        raise DataError(f"data.path {str(source)!r}: {len(skipped)} files are not readable images (first: {first}); "
                        f"more than data.max_bad_fraction={cfg.max_bad_fraction:g}")
    if skipped:
        log.warning("data.path %s: %d files skipped as not readable images (first: %s)", source, len(skipped),
                    ", ".join(skipped[:5]))
    return _in_memory(cfg, x, y, images.classes, str(source), len(skipped))


def _streams(cfg: DataConfig, n_images: int) -> bool:
    if cfg.stream == "always":
        return True
    if cfg.stream == "never":
        return False
    in_memory_mb = n_images * 3 * cfg.resolution**2 / 2**20
    return in_memory_mb > cfg.stream_above_mb


def _streamed(cfg: DataConfig, images: ImageList) -> StreamedDataset:
    digest = cache.content_digest(images.source)
    root = extracted_folder(images, cache.cache_dir(cfg.cache_dir), digest)
    # Unreadable files are found now, not in the middle of a trial: every file is opened once.
    good: list[int] = []
    for i, data in enumerate(read_bytes(images)):
        if decode_image(data, 8) is not None:
            good.append(i)
    bad = [images.names[i] for i in sorted(set(range(len(images))) - set(good))] + list(images.skipped)
    report_skipped(images.source, bad, len(images) + len(images.skipped), cfg.max_bad_fraction)
    labels = images.labels[good]
    names = [images.names[i] for i in good]
    tr, va = split_indices(labels, cfg.val_fraction, cfg.seed)
    tr, va = _subsample(tr, cfg.max_train_samples, cfg.seed), _subsample(va, cfg.max_val_samples, cfg.seed)
    sample = np.random.default_rng(cfg.seed).permutation(tr)[:_STAT_SAMPLE]
    decoded = [decode_image((root / names[i]).read_bytes(), cfg.resolution) for i in sample]
    x_sample = np.stack([img for img in decoded if img is not None])
    mean, std = _stats(x_sample)
    return StreamedDataset(
        name=cfg.name, source=str(images.source), root=str(root), train_files=tuple(names[i] for i in tr),
        train_labels=labels[tr], val_files=tuple(names[i] for i in va), val_labels=labels[va],
        classes=images.classes, mean=mean, std=std, resolution=cfg.resolution,
        mirror_invariant=cfg.mirror_invariant, loader_workers=cfg.loader_workers,
    )


# ---------------------------------------------------------------------- other sources


def _digits(resolution: int) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], str]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.from_numpy(bunch.images.astype(np.float32) / 16.0).unsqueeze(1)  # (N, 1, 8, 8) in [0, 1]
    up = F.interpolate(images, size=(resolution, resolution), mode="bilinear", align_corners=False)
    x = (up.clamp(0, 1) * 255).round().to(torch.uint8).repeat(1, 3, 1, 1).numpy()
    return x, bunch.target.astype(np.int64), tuple(str(i) for i in range(10)), "sklearn.datasets.load_digits"


def _existing(path: str | None, folder: bool) -> Path:
    if not path:
        raise DataError("data.path is not set: point it at the dataset's local folder"
                        + ("" if folder else " or a .tar/.tar.gz archive of it"))
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"data.path {str(p)!r} does not exist (datasets are never downloaded: give a local "
                        + ("folder)" if folder else "folder or archive)"))
    if folder and not p.is_dir():
        raise DataError(f"data.path {str(p)!r} is not a folder")
    if not folder and not (p.is_dir() or is_archive(p)):
        raise DataError(f"data.path {str(p)!r} is neither a folder nor a .tar/.tar.gz archive")
    return p.resolve()


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, bytes, numbers and numpy arrays only; anything else is refused.

    ``_codecs.encode`` (a pure function) is how Python 3 writes bytes in protocol-2 pickles.
    """

    _reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]
    _ALLOWED: ClassVar[dict[tuple[str, str], Any]] = {
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): codecs.encode,
    }

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dataset file") from None


def _load_cifar_batch(path: Path) -> dict[bytes, Any]:
    if not path.is_file():
        raise DataError(
            f"CIFAR-10 file {str(path)!r} is missing; data.path must be the 'cifar-10-batches-py' folder with "
            f"{', '.join(CIFAR10_TRAIN)}"
        )
    try:
        with path.open("rb") as f:
            d = _ArrayUnpickler(f, encoding="bytes").load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError) as err:
        raise DataError(f"cannot read CIFAR-10 batch {str(path)!r}: {err}") from None
    if not isinstance(d, dict) or b"data" not in d or b"labels" not in d:
        raise DataError(f"{str(path)!r} is not a CIFAR-10 python batch (expected a dict with data and labels)")
    return d


def _cifar10(root: Path, resolution: int) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], str]:
    xs, ys = [], []
    for n in CIFAR10_TRAIN:  # the training batches only: validation is carved from them
        d = _load_cifar_batch(root / n)
        data = np.asarray(d[b"data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3072:
            raise DataError(f"{str(root / n)!r}: expected data of shape (N, 3072), got {data.shape}")
        xs.append(data.reshape(-1, 3, 32, 32))
        ys.append(np.asarray(d[b"labels"], dtype=np.int64))
    x, y = np.concatenate(xs), np.concatenate(ys)
    classes: tuple[str, ...] = tuple(str(i) for i in range(10))
    meta = root / "batches.meta"
    if meta.is_file():
        try:
            with meta.open("rb") as f:
                names = _ArrayUnpickler(f, encoding="bytes").load().get(b"label_names")
            if names and len(names) == 10:
                classes = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, AttributeError) as err:
            raise DataError(f"cannot read {str(meta)!r}: {err}") from None
    if resolution != 32:
        x = _resize(x, resolution)
    return x, y, classes, str(root)


# ---------------------------------------------------------------------- helpers


def _resize(x: np.ndarray, resolution: int) -> np.ndarray:
    t = torch.from_numpy(x).float()
    out = F.interpolate(t, size=(resolution, resolution), mode="bilinear", align_corners=False)
    return out.round().clamp(0, 255).to(torch.uint8).numpy()


def _stats(x: np.ndarray) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    scaled = x.astype(np.float64) / 255.0
    mean = scaled.mean(axis=(0, 2, 3))
    std = np.maximum(scaled.std(axis=(0, 2, 3)), 1e-3)
    return (float(mean[0]), float(mean[1]), float(mean[2])), (float(std[0]), float(std[1]), float(std[2]))


def split_indices(y: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Training and validation indices: a seeded split, stratified by class (each class keeps its share).

    Raises:
        DataError: too few images to hold any out.
    """
    from sklearn.model_selection import train_test_split

    counts = np.bincount(y)
    stratify = y if counts[counts > 0].min() >= 2 else None
    try:
        tr, va = train_test_split(np.arange(len(y)), test_size=val_fraction, random_state=seed, stratify=stratify)
    except ValueError as err:
        raise DataError(f"cannot split {len(y)} images with data.val_fraction={val_fraction}: {err}") from None
    return np.sort(tr), np.sort(va)


def _subsample(idx: np.ndarray, limit: int | None, seed: int) -> np.ndarray:
    if limit is None or limit >= len(idx):
        return idx
    return np.sort(np.random.default_rng(seed).permutation(idx)[:limit])
