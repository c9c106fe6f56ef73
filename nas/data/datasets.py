"""Proxy-task datasets, loaded once in the driver and shipped to every trial.

Nothing is ever downloaded. Three sources:

* ``digits``: scikit-learn's handwritten digits (1,797 8x8 images, 10 classes), which ship
  inside the scikit-learn package; upsampled to ``resolution`` and repeated to 3 channels.
* ``cifar10``: a CIFAR-10 folder in its standard python format (``data_batch_1`` ...
  ``data_batch_5``, ``test_batch``) that the user already has on local disk, given as
  ``data.path``. The batches are pickles: they are read with an unpickler that accepts only
  plain containers and numpy arrays, so a tampered file cannot run code.
* ``image_folder``: ``<path>/<class name>/<image files>`` read with Pillow.

Images are kept as ``uint8`` arrays of shape ``(N, 3, R, R)`` (compact enough for Ray's
object store even for CIFAR-10) with per-channel mean and standard deviation of the training
split; :meth:`Dataset.batch` normalises on the fly.
"""

from __future__ import annotations

import codecs
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from nas.core.config import DataConfig
from nas.core.errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST = "test_batch"


@dataclass(frozen=True)
class Dataset:
    """A classification proxy task split into training and validation images.

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

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self.classes)

    @property
    def resolution(self) -> int:
        """Image side length in pixels."""
        return int(self.x_train.shape[-1])

    def batch(self, images: np.ndarray | torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
        """Normalised ``float32`` tensor of some ``uint8`` images of this dataset."""
        # A copy: arrays from Ray's object store are read-only.
        x = torch.tensor(images, dtype=torch.float32, device=device).div_(255.0)
        mean = torch.tensor(self.mean, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, device=x.device).view(1, 3, 1, 1)
        return (x - mean) / std

    def labels(self, labels: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
        """``int64`` tensor of some labels of this dataset (a copy, as for :meth:`batch`)."""
        return torch.tensor(labels, dtype=torch.int64, device=device)

    def summary(self) -> dict[str, Any]:
        """Sizes and source, for the search record."""
        return {
            "name": self.name, "source": self.source, "train": len(self.y_train), "val": len(self.y_val),
            "classes": self.num_classes, "resolution": self.resolution,
        }


def load_dataset(cfg: DataConfig) -> Dataset:
    """Load and split the proxy task described by ``cfg``.

    Raises:
        DataError: the path is missing or unreadable, or the files are not in the expected format.
    """
    if cfg.name == "digits":
        x, y, classes, source = _digits(cfg.resolution)
        x_tr, y_tr, x_va, y_va = _split(x, y, cfg.val_fraction, cfg.seed)
    elif cfg.name == "cifar10":
        x_tr, y_tr, x_va, y_va, classes, source = _cifar10(_existing_dir(cfg.path), cfg.resolution)
    elif cfg.name == "image_folder":
        x, y, classes, source = _image_folder(_existing_dir(cfg.path), cfg.resolution)
        x_tr, y_tr, x_va, y_va = _split(x, y, cfg.val_fraction, cfg.seed)
    else:
        raise DataError(f"data.name: unknown dataset {cfg.name!r}; choose digits, cifar10 or image_folder")
    x_tr, y_tr = _subsample(x_tr, y_tr, cfg.max_train_samples, cfg.seed)
    x_va, y_va = _subsample(x_va, y_va, cfg.max_val_samples, cfg.seed)
    scaled = x_tr.astype(np.float64) / 255.0
    mean = scaled.mean(axis=(0, 2, 3))
    std = np.maximum(scaled.std(axis=(0, 2, 3)), 1e-3)
    return Dataset(
        cfg.name, source, np.ascontiguousarray(x_tr), y_tr.astype(np.int64), np.ascontiguousarray(x_va),
        y_va.astype(np.int64), classes,
        (float(mean[0]), float(mean[1]), float(mean[2])), (float(std[0]), float(std[1]), float(std[2])),
    )


# ---------------------------------------------------------------------- sources


def _digits(resolution: int) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], str]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.from_numpy(bunch.images.astype(np.float32) / 16.0).unsqueeze(1)  # (N, 1, 8, 8) in [0, 1]
    up = F.interpolate(images, size=(resolution, resolution), mode="bilinear", align_corners=False)
    x = (up.clamp(0, 1) * 255).round().to(torch.uint8).repeat(1, 3, 1, 1).numpy()
    return x, bunch.target.astype(np.int64), tuple(str(i) for i in range(10)), "sklearn.datasets.load_digits"


def _existing_dir(path: str | None) -> Path:
    if not path:
        raise DataError("data.path is not set: point it at the dataset's local folder")
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"data.path {str(p)!r} does not exist (datasets are never downloaded: give a local folder)")
    if not p.is_dir():
        raise DataError(f"data.path {str(p)!r} is not a folder")
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
            f"{', '.join(CIFAR10_TRAIN)} and {CIFAR10_TEST}"
        )
    try:
        with path.open("rb") as f:
            d = _ArrayUnpickler(f, encoding="bytes").load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError) as err:
        raise DataError(f"cannot read CIFAR-10 batch {str(path)!r}: {err}") from None
    if not isinstance(d, dict) or b"data" not in d or b"labels" not in d:
        raise DataError(f"{str(path)!r} is not a CIFAR-10 python batch (expected a dict with data and labels)")
    return d


def _cifar10(
    root: Path, resolution: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[str, ...], str]:
    def read(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for n in names:
            d = _load_cifar_batch(root / n)
            data = np.asarray(d[b"data"], dtype=np.uint8)
            if data.ndim != 2 or data.shape[1] != 3072:
                raise DataError(f"{str(root / n)!r}: expected data of shape (N, 3072), got {data.shape}")
            xs.append(data.reshape(-1, 3, 32, 32))
            ys.append(np.asarray(d[b"labels"], dtype=np.int64))
        return np.concatenate(xs), np.concatenate(ys)

    x_tr, y_tr = read(CIFAR10_TRAIN)
    x_va, y_va = read((CIFAR10_TEST,))
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
        x_tr, x_va = _resize(x_tr, resolution), _resize(x_va, resolution)
    return x_tr, y_tr, x_va, y_va, classes, str(root)


def _image_folder(root: Path, resolution: int) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], str]:
    from PIL import Image, UnidentifiedImageError

    class_dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(class_dirs) < 2:
        raise DataError(f"{str(root)!r} needs one sub-folder per class (at least 2); found {len(class_dirs)}")
    xs: list[np.ndarray] = []
    ys: list[int] = []
    for label, d in enumerate(class_dirs):
        files = sorted(p for p in d.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise DataError(f"class folder {str(d)!r} has no images ({', '.join(IMAGE_SUFFIXES)})")
        for f in files:
            try:
                with Image.open(f) as im:
                    rgb = im.convert("RGB").resize((resolution, resolution), Image.Resampling.BILINEAR)
            except (OSError, UnidentifiedImageError) as err:
                raise DataError(f"cannot read image {str(f)!r}: {err}") from None
            xs.append(np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1))
            ys.append(label)
    return np.stack(xs), np.asarray(ys, dtype=np.int64), tuple(d.name for d in class_dirs), str(root)


# ---------------------------------------------------------------------- helpers


def _resize(x: np.ndarray, resolution: int) -> np.ndarray:
    t = torch.from_numpy(x).float()
    out = F.interpolate(t, size=(resolution, resolution), mode="bilinear", align_corners=False)
    return out.round().clamp(0, 255).to(torch.uint8).numpy()


def _split(x: np.ndarray, y: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, ...]:
    from sklearn.model_selection import train_test_split

    counts = np.bincount(y)
    stratify = y if counts[counts > 0].min() >= 2 else None
    try:
        x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=val_fraction, random_state=seed, stratify=stratify)
    except ValueError as err:
        raise DataError(f"cannot split {len(y)} images with data.val_fraction={val_fraction}: {err}") from None
    return x_tr, y_tr, x_va, y_va


def _subsample(x: np.ndarray, y: np.ndarray, limit: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if limit is None or limit >= len(y):
        return x, y
    idx = np.sort(np.random.default_rng(seed).permutation(len(y))[:limit])
    return x[idx], y[idx]
