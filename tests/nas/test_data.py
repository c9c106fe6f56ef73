"""Proxy-task datasets: digits, a CIFAR-10 pickle folder, image folders and archives, the cache,
bad files, the streaming path, and the real CIFAR-10 JPEG archive where it is available."""

from __future__ import annotations

import io
import logging
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from nas.accuracy.training import train_briefly
from nas.core.config import DataConfig, TrainConfig
from nas.core.errors import DataError
from nas.data import CIFAR10_TRAIN, Dataset, StreamedDataset, load_dataset
from search_spaces import build, load_space

CIFAR10_JPEG = Path(os.environ.get("LATNAS_CIFAR10_JPEG", Path(__file__).resolve().parents[3] / "shared" / "data"
                                   / "cifar10-train-jpeg.tar.gz"))
"""The 50,000 CIFAR-10 training images as a JPEG archive ($LATNAS_CIFAR10_JPEG, else beside the repository)."""


def test_digits_is_split_upsampled_and_three_channel() -> None:
    d = load_dataset(DataConfig(resolution=32))
    assert isinstance(d, Dataset)
    assert d.x_train.shape == (1437, 3, 32, 32) and d.x_val.shape == (360, 3, 32, 32)
    assert d.x_train.dtype == np.uint8 and d.y_train.dtype == np.int64
    assert d.num_classes == 10 and set(np.unique(d.y_val)) == set(range(10))
    assert np.array_equal(d.x_train[:, 0], d.x_train[:, 2])  # grey repeated to 3 channels
    xb, yb = next(d.val_batches(8))
    x = d.normalise(xb)
    assert x.shape == (8, 3, 32, 32) and x.dtype == torch.float32 and yb.dtype == torch.int64
    assert abs(float(d.normalise(torch.from_numpy(d.x_train)).mean())) < 0.05  # the training statistics


def test_digits_split_is_seeded_stratified_and_subsampling_limits() -> None:
    a = load_dataset(DataConfig(seed=1, max_train_samples=100, max_val_samples=50, resolution=16))
    b = load_dataset(DataConfig(seed=1, max_train_samples=100, max_val_samples=50, resolution=16))
    assert isinstance(a, Dataset) and isinstance(b, Dataset)
    assert a.n_train == 100 and a.n_val == 50 and a.resolution == 16
    assert np.array_equal(a.y_train, b.y_train) and np.array_equal(a.x_val, b.x_val)
    full = load_dataset(DataConfig(seed=1))
    assert isinstance(full, Dataset)
    counts = np.bincount(full.y_val, minlength=10)
    assert counts.max() - counts.min() <= 2  # every class keeps its share of the validation split


def _write_cifar(root: Path, n: int = 20) -> None:
    rng = np.random.default_rng(0)
    root.mkdir()
    for name in CIFAR10_TRAIN:
        batch = {
            b"batch_label": name.encode(), b"labels": [int(v) for v in rng.integers(0, 10, n)],
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"filenames": [b"x.png"] * n,
        }
        with (root / name).open("wb") as f:
            pickle.dump(batch, f, protocol=2)
    with (root / "batches.meta").open("wb") as f:
        pickle.dump({b"label_names": [f"class{i}".encode() for i in range(10)]}, f, protocol=2)


def test_cifar10_folder_validates_on_its_training_batches(tmp_path: Path) -> None:
    root = tmp_path / "cifar-10-batches-py"
    _write_cifar(root)  # no test batch: it is not needed
    d = load_dataset(DataConfig(name="cifar10", path=str(root), resolution=32, val_fraction=0.2))
    assert isinstance(d, Dataset)
    assert d.x_train.shape == (80, 3, 32, 32) and d.x_val.shape == (20, 3, 32, 32)
    assert d.classes[3] == "class3"
    # Row layout of a CIFAR batch: 1024 red, then green, then blue values, row-major.
    raw = np.concatenate([pickle.load((root / n).open("rb"), encoding="bytes")[b"data"] for n in CIFAR10_TRAIN])
    val_rows = {bytes(r) for r in d.x_val.reshape(len(d.x_val), -1)}
    assert val_rows <= {bytes(r) for r in raw}  # validation images are training-batch images
    small = load_dataset(DataConfig(name="cifar10", path=str(root), resolution=16))
    assert isinstance(small, Dataset) and small.x_train.shape[-1] == 16


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


# ---------------------------------------------------------------------- image folders and archives


def _png(rng: np.random.Generator, size: tuple[int, int] = (20, 30)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _folder(root: Path, classes: tuple[str, ...] = ("cat", "dog", "owl"), per_class: int = 6) -> Path:
    rng = np.random.default_rng(0)
    for cls in classes:
        (root / cls).mkdir(parents=True)
        for i in range(per_class):
            (root / cls / f"{i:04d}.png").write_bytes(_png(rng))
    return root


def _archive(folder: Path, out: Path, top: str = "train") -> Path:
    with tarfile.open(out, "w:gz" if out.name.endswith("gz") else "w") as tar:
        tar.add(folder, arcname=top)
    return out


def _cfg(path: Path, tmp_path: Path, **kw: object) -> DataConfig:
    kw.setdefault("resolution", 24)
    kw.setdefault("val_fraction", 0.5)
    return DataConfig(name="image_folder", path=str(path), cache_dir=str(tmp_path / "cache"), **kw)  # type: ignore[arg-type]


def test_image_folder_is_split_by_class(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "imgs")
    d = load_dataset(_cfg(folder, tmp_path))
    assert isinstance(d, Dataset)
    assert d.classes == ("cat", "dog", "owl")
    assert d.x_train.shape == (9, 3, 24, 24) and d.n_val == 9
    assert sorted(np.bincount(d.y_val)) == [3, 3, 3]  # stratified


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_an_archive_gives_the_same_images_as_its_folder(tmp_path: Path, suffix: str) -> None:
    folder = _folder(tmp_path / "imgs")
    archive = _archive(folder, tmp_path / f"imgs{suffix}")  # train/<class>/... : the lone top folder is entered
    a = load_dataset(_cfg(folder, tmp_path))
    b = load_dataset(_cfg(archive, tmp_path))
    assert isinstance(a, Dataset) and isinstance(b, Dataset)
    assert a.classes == b.classes
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_val, b.y_val)


def test_the_second_load_comes_from_the_cache_and_a_change_is_noticed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _folder(tmp_path / "imgs")
    archive = _archive(folder, tmp_path / "imgs.tar.gz")
    with caplog.at_level(logging.INFO, logger="nas.data"):
        first = load_dataset(_cfg(archive, tmp_path))
        assert "decoding 18 images" in caplog.text
        caplog.clear()
        again = load_dataset(_cfg(archive, tmp_path))
        assert "from the cache" in caplog.text and "decoding" not in caplog.text
        assert isinstance(first, Dataset) and isinstance(again, Dataset)
        assert np.array_equal(first.x_train, again.x_train)
        assert len(list((tmp_path / "cache").glob("*.npz"))) == 1
        caplog.clear()
        other = load_dataset(_cfg(archive, tmp_path, resolution=16))  # another resolution: another entry
        assert "decoding 18 images" in caplog.text and other.resolution == 16
        caplog.clear()
        (folder / "owl" / "0000.png").write_bytes(_png(np.random.default_rng(9)))
        _archive(folder, archive)  # new content: the old entry is not reused
        load_dataset(_cfg(archive, tmp_path))
        assert "decoding 18 images" in caplog.text


def test_unreadable_files_are_skipped_counted_and_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = _folder(tmp_path / "imgs", per_class=40)
    (folder / "cat" / "0001.png").write_bytes(b"not a png at all")
    (folder / "dog" / "notes.txt").write_text("not an image")
    with caplog.at_level(logging.WARNING, logger="nas.data"):
        d = load_dataset(_cfg(folder, tmp_path, max_bad_fraction=0.05))
    assert d.n_train + d.n_val == 119
    assert "skipped 2 of 121 files" in caplog.text
    assert "cat/0001.png" in caplog.text and "dog/notes.txt" in caplog.text
    with pytest.raises(DataError, match=r"2 of 121 files \(1\.7%\) are not readable images.*cat/0001\.png"):
        load_dataset(_cfg(folder, tmp_path / "other", max_bad_fraction=0.01))


def test_a_bad_layout_is_a_clear_error_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.png").write_bytes(_png(np.random.default_rng(0)))
    with pytest.raises(DataError, match="no class folders"):
        load_dataset(_cfg(tmp_path / "flat", tmp_path))
    single = _archive(_folder(tmp_path / "one", classes=("only",)), tmp_path / "one.tar")
    with pytest.raises(DataError, match="at least 2 class folders; found only 'only'"):
        load_dataset(_cfg(single, tmp_path))
    folder = _folder(tmp_path / "two", classes=("a", "b"))
    (folder / "empty").mkdir()
    with pytest.raises(DataError, match="class folder 'empty' has no images"):
        load_dataset(_cfg(folder, tmp_path))
    (tmp_path / "f.txt").write_text("")
    with pytest.raises(DataError, match=r"neither a folder nor a \.tar/\.tar\.gz archive"):
        load_dataset(_cfg(tmp_path / "f.txt", tmp_path))
    (tmp_path / "broken.tar.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(DataError, match="cannot read the archive"):
        load_dataset(_cfg(tmp_path / "broken.tar.gz", tmp_path))


# ---------------------------------------------------------------------- the streaming path


def test_a_streamed_dataset_reads_the_same_images_and_trains(tmp_path: Path) -> None:
    archive = _archive(_folder(tmp_path / "imgs", per_class=12), tmp_path / "imgs.tar.gz")
    in_memory = load_dataset(_cfg(archive, tmp_path, stream="never", val_fraction=0.25))
    streamed = load_dataset(_cfg(archive, tmp_path, stream="always", val_fraction=0.25, loader_workers=1))
    assert isinstance(in_memory, Dataset) and isinstance(streamed, StreamedDataset)
    assert (tmp_path / "cache" / "extracted").is_dir()  # an archive is extracted once for random access
    assert streamed.summary()["streamed"] and (streamed.n_train, streamed.n_val) == (in_memory.n_train, in_memory.n_val)
    x, y = zip(*streamed.val_batches(4), strict=True)
    assert torch.equal(torch.cat(x), torch.from_numpy(in_memory.x_val))
    assert torch.equal(torch.cat(y), torch.from_numpy(in_memory.y_val))
    torch.manual_seed(0)
    net = build(load_space("tiny").extremes()[0], num_classes=3)
    epochs = train_briefly(net, streamed, TrainConfig(epochs=1, batch_size=8), torch.device("cpu"))
    assert len(epochs) == 1 and 0.0 <= epochs[0].accuracy <= 1.0 and np.isfinite(epochs[0].val_loss)


def test_stream_auto_streams_above_the_size_limit(tmp_path: Path) -> None:
    archive = _archive(_folder(tmp_path / "imgs"), tmp_path / "imgs.tar")
    small_limit = load_dataset(_cfg(archive, tmp_path, stream_above_mb=0.001, loader_workers=0))
    assert isinstance(small_limit, StreamedDataset)
    assert isinstance(load_dataset(_cfg(archive, tmp_path)), Dataset)


# ---------------------------------------------------------------------- the real CIFAR-10 archive


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.skipif(not CIFAR10_JPEG.is_file(), reason="the CIFAR-10 JPEG archive is not available here")
def test_the_cifar10_jpeg_archive_loads_with_a_carved_validation_split(tmp_path: Path) -> None:
    cfg = DataConfig(name="image_folder", path=str(CIFAR10_JPEG), resolution=32, val_fraction=0.1,
                     max_train_samples=2000, max_val_samples=500, cache_dir=str(tmp_path / "cache"))
    d = load_dataset(cfg)
    assert isinstance(d, Dataset)
    assert d.classes == ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
    assert (d.n_train, d.n_val) == (2000, 500) and d.skipped == 0
    assert sorted(np.bincount(d.y_val, minlength=10))[0] >= 35  # stratified: every class is there
    assert 0.4 < d.mean[0] < 0.55 and d.std[0] > 0.2  # CIFAR-10's known channel statistics (red ~0.49)
