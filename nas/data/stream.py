"""The path for datasets that do not fit in memory: each trial streams images from disk.

A :class:`StreamedDataset` holds the file list of its split, not the images, so it travels to
every trial cheaply; each trial reads its batches with a ``torch.utils.data.DataLoader``
(``data.loader_workers`` processes decoding with Pillow, pinned memory when the trial trains on
CUDA). The images must be on a file system every trial node can read (local NVMe with the same
path on every node, or shared storage): see docs/cluster.md. An archive is extracted once into
the cache folder (``<cache>/extracted/<content digest>/``), because a compressed tar has no
random access.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

from nas.core.errors import DataError
from nas.data.images import ImageList, decode_image


class _ImageFiles(TorchDataset[tuple[torch.Tensor, int]]):
    """Images decoded from files as ``uint8`` ``(3, R, R)`` tensors (an unreadable file: an error)."""

    def __init__(self, paths: Sequence[str], labels: np.ndarray, resolution: int) -> None:
        self.paths = list(paths)
        self.labels = labels
        self.resolution = resolution

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        img = decode_image(Path(self.paths[i]).read_bytes(), self.resolution)
        if img is None:
            raise DataError(f"cannot read image {self.paths[i]!r} (it was readable when the dataset was listed)")
        return torch.from_numpy(img), int(self.labels[i])


@dataclass(frozen=True)
class StreamedDataset:
    """A proxy task whose images stay on disk; the same interface as :class:`nas.data.Dataset`.

    Attributes:
        name: the dataset's kind (``image_folder``).
        source: where the images came from (for the record).
        root: the folder the file names are relative to.
        train_files: training images (relative paths).
        train_labels: their labels.
        val_files: validation images.
        val_labels: their labels.
        classes: class names, index = label.
        mean: per-channel mean of (a sample of) the training images, in [0, 1].
        std: per-channel standard deviation, in [0, 1].
        resolution: image side length.
        mirror_invariant: whether a mirrored image shows the same class (horizontal flips allowed).
        loader_workers: DataLoader processes per trial.
    """

    name: str
    source: str
    root: str
    train_files: tuple[str, ...]
    train_labels: np.ndarray
    val_files: tuple[str, ...]
    val_labels: np.ndarray
    classes: tuple[str, ...]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    resolution: int
    mirror_invariant: bool = True
    loader_workers: int = 2

    streamed = True
    images = True

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self.classes)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """One image's shape as the network takes it: ``(3, R, R)``."""
        return (3, self.resolution, self.resolution)

    @property
    def n_train(self) -> int:
        """Training images."""
        return len(self.train_files)

    @property
    def n_val(self) -> int:
        """Validation images."""
        return len(self.val_files)

    def _loader(self, files: Sequence[str], labels: np.ndarray, order: np.ndarray, batch_size: int,
                device: torch.device | str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        dev = torch.device(device)
        ds = _ImageFiles([str(Path(self.root) / files[i]) for i in order], labels[order], self.resolution)
        loader = DataLoader(ds, batch_size=batch_size, shuffle=False, num_workers=self.loader_workers,
                            pin_memory=dev.type == "cuda", persistent_workers=False)
        for x, y in loader:
            yield x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)

    def train_batches(self, batch_size: int, rng: np.random.Generator,
                      device: torch.device | str = "cpu") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch of ``uint8`` training batches in a random order (``rng``), with their labels."""
        return self._loader(self.train_files, self.train_labels, rng.permutation(self.n_train), batch_size, device)

    def val_batches(self, batch_size: int, device: torch.device | str = "cpu") -> Iterator[
            tuple[torch.Tensor, torch.Tensor]]:
        """The validation split in ``uint8`` batches, in order."""
        return self._loader(self.val_files, self.val_labels, np.arange(self.n_val), batch_size, device)

    def sample_train(self, n: int, seed: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` training images chosen with ``seed`` (``uint8``), and their labels."""
        idx = np.sort(np.random.default_rng(seed).permutation(self.n_train)[: min(n, self.n_train)])
        return next(iter(self._loader(self.train_files, self.train_labels, idx, len(idx), device)))

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """``uint8`` images as normalised ``float32`` (per-channel mean and standard deviation)."""
        return normalise_uint8(x, self.mean, self.std)

    def take_train(self, n: int, seed: int) -> StreamedDataset:
        """The same task with ``n`` training images chosen with ``seed`` (all when ``n`` is larger)."""
        if n >= self.n_train:
            return self
        idx = np.sort(np.random.default_rng(seed).permutation(self.n_train)[:n])
        return replace(self, train_files=tuple(self.train_files[i] for i in idx), train_labels=self.train_labels[idx])

    def shard(self, rank: int, world: int) -> StreamedDataset:
        """Training images ``rank``, ``rank + world``, ... (one process's share in data-parallel
        training); the validation split whole."""
        return replace(self, train_files=self.train_files[rank::world], train_labels=self.train_labels[rank::world])

    def summary(self) -> dict[str, Any]:
        """Sizes and source, for the search record."""
        return {"name": self.name, "source": self.source, "train": self.n_train, "val": self.n_val,
                "classes": self.num_classes, "resolution": self.resolution, "streamed": True}


def normalise_uint8(x: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    out = x.float().div_(255.0)
    m = torch.tensor(mean, device=x.device).view(1, 3, 1, 1)
    s = torch.tensor(std, device=x.device).view(1, 3, 1, 1)
    return (out - m) / s


def extracted_folder(images: ImageList, cache: Path, digest: str) -> Path:
    """A folder holding ``images``' files: the folder itself, or the archive extracted once under ``cache``.

    Raises:
        DataError: the archive cannot be extracted there.
    """
    if images.source.is_dir():
        return images.source / images.root if images.root else images.source
    target = cache / "extracted" / digest[:24]
    done = target / ".complete"
    if not done.is_file():
        try:
            target.mkdir(parents=True, exist_ok=True)
            with tarfile.open(images.source, "r:*") as tar:
                tar.extractall(target, filter="data")  # no absolute paths, no links out of the folder
            done.write_text("extracted\n")
        except (tarfile.TarError, OSError) as err:
            raise DataError(f"cannot extract {str(images.source)!r} into {str(target)!r}: {err}") from None
    return target / images.root if images.root else target
