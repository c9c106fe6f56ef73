"""Proxy-task datasets: digits (shipped with scikit-learn), a CIFAR-10 folder, an image folder."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from nas.core.config import DataConfig
from nas.core.errors import DataError
from nas.data import CIFAR10_TEST, CIFAR10_TRAIN, load_dataset


def test_digits_is_split_upsampled_and_three_channel() -> None:
    d = load_dataset(DataConfig(resolution=32))
    assert d.x_train.shape == (1437, 3, 32, 32) and d.x_val.shape == (360, 3, 32, 32)
    assert d.x_train.dtype == np.uint8 and d.y_train.dtype == np.int64
    assert d.num_classes == 10 and set(np.unique(d.y_val)) == set(range(10))
    assert np.array_equal(d.x_train[:, 0], d.x_train[:, 2])  # grey repeated to 3 channels
    x = d.batch(d.x_val[:8])
    assert x.shape == (8, 3, 32, 32) and x.dtype == torch.float32
    assert abs(float(d.batch(d.x_train).mean())) < 0.05  # normalised with the training statistics


def test_digits_split_is_seeded_and_subsampling_limits() -> None:
    a = load_dataset(DataConfig(seed=1, max_train_samples=100, max_val_samples=50, resolution=16))
    b = load_dataset(DataConfig(seed=1, max_train_samples=100, max_val_samples=50, resolution=16))
    assert len(a.y_train) == 100 and len(a.y_val) == 50 and a.resolution == 16
    assert np.array_equal(a.y_train, b.y_train) and np.array_equal(a.x_val, b.x_val)


def _write_cifar(root: Path, n: int = 20) -> None:
    rng = np.random.default_rng(0)
    root.mkdir()
    for name in (*CIFAR10_TRAIN, CIFAR10_TEST):
        batch = {
            b"batch_label": name.encode(), b"labels": [int(v) for v in rng.integers(0, 10, n)],
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"filenames": [b"x.png"] * n,
        }
        with (root / name).open("wb") as f:
            pickle.dump(batch, f, protocol=2)
    with (root / "batches.meta").open("wb") as f:
        pickle.dump({b"label_names": [f"class{i}".encode() for i in range(10)]}, f, protocol=2)


def test_cifar10_folder_in_the_python_format(tmp_path: Path) -> None:
    _write_cifar(tmp_path / "cifar-10-batches-py")
    d = load_dataset(DataConfig(name="cifar10", path=str(tmp_path / "cifar-10-batches-py"), resolution=32))
    assert d.x_train.shape == (100, 3, 32, 32) and d.x_val.shape == (20, 3, 32, 32)
    assert d.classes[3] == "class3"
    # Row layout of a CIFAR batch: 1024 red, then green, then blue values, row-major.
    with (tmp_path / "cifar-10-batches-py" / CIFAR10_TEST).open("rb") as f:
        raw = pickle.load(f, encoding="bytes")[b"data"]
    assert np.array_equal(d.x_val[0, 1].reshape(-1), raw[0, 1024:2048])
    small = load_dataset(DataConfig(name="cifar10", path=str(tmp_path / "cifar-10-batches-py"), resolution=16))
    assert small.x_train.shape[-1] == 16


def test_cifar10_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"does not exist.*never downloaded"):
        load_dataset(DataConfig(name="cifar10", path=str(tmp_path / "absent")))
    root = tmp_path / "c"
    _write_cifar(root)
    (root / "data_batch_3").unlink()
    with pytest.raises(DataError, match=r"data_batch_3.*missing"):
        load_dataset(DataConfig(name="cifar10", path=str(root)))


class _Evil:
    # os.system, not print: Ray replaces builtins.print in processes that imported it.
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("echo pwned",))


def test_cifar10_pickles_cannot_run_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    _write_cifar(root)
    with (root / "data_batch_1").open("wb") as f:
        pickle.dump({b"data": _Evil(), b"labels": []}, f, protocol=2)
    with pytest.raises(DataError, match=r"refusing to load (posix|os|nt)\.system"):
        load_dataset(DataConfig(name="cifar10", path=str(root)))
    assert "pwned" not in capsys.readouterr().out


def test_image_folder(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("cat", "dog", "owl"):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(6):
            arr = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
            Image.fromarray(arr).save(tmp_path / "imgs" / cls / f"{i}.png")
    (tmp_path / "imgs" / "cat" / "notes.txt").write_text("not an image")
    d = load_dataset(DataConfig(name="image_folder", path=str(tmp_path / "imgs"), resolution=24, val_fraction=0.5))
    assert d.classes == ("cat", "dog", "owl")
    assert d.x_train.shape == (9, 3, 24, 24) and len(d.y_val) == 9
    assert sorted(np.bincount(d.y_val)) == [3, 3, 3]  # stratified


def test_image_folder_errors(tmp_path: Path) -> None:
    (tmp_path / "one" / "only").mkdir(parents=True)
    with pytest.raises(DataError, match="one sub-folder per class"):
        load_dataset(DataConfig(name="image_folder", path=str(tmp_path / "one")))
    (tmp_path / "one" / "empty").mkdir()
    with pytest.raises(DataError, match="has no images"):
        load_dataset(DataConfig(name="image_folder", path=str(tmp_path / "one")))
    (tmp_path / "f.txt").write_text("")
    with pytest.raises(DataError, match="is not a folder"):
        load_dataset(DataConfig(name="image_folder", path=str(tmp_path / "f.txt")))
