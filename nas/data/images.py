"""Image-folder datasets, from a folder or a ``.tar``/``.tar.gz`` archive of one.

Layout: ``<root>/<class name>/<image file>``; an archive (or a folder) whose top level holds a
single folder and nothing else is entered (ImageNet-style ``train/<class>/...`` archives). Class
names are the folder names, sorted; hidden files and folders are ignored.

:func:`scan` lists the images without decoding them and checks the layout before any work: no
class folders, a single class or an empty class is a :class:`~nas.core.errors.DataError` naming
it. :func:`decode_all` decodes every image to ``uint8`` ``(3, R, R)`` in parallel processes;
a file that is not a readable image (a corrupt JPEG, a text file) is skipped, counted and named
in the log, and more than ``max_bad_fraction`` of them is an error (the dataset is not what it
seems). Nothing is ever downloaded, and an archive is only read (an extracted copy, which the
streaming path needs, goes to the cache folder; see :mod:`nas.data.cache`).
"""

from __future__ import annotations

import io
import logging
import os
import tarfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from nas.core.errors import DataError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
_CHUNK = 512  # images decoded per task


def is_archive(path: Path) -> bool:
    """Whether ``path`` names a tar archive (by its suffix)."""
    return path.name.endswith(ARCHIVE_SUFFIXES)


@dataclass(frozen=True)
class ImageList:
    """The images of an image-folder dataset, listed but not decoded.

    Attributes:
        source: the folder or archive.
        root: the path, inside the folder or archive, of the folder holding the class folders
            (``""`` for the top level).
        classes: class names, index = label.
        names: each image's path relative to ``root`` (``<class>/<file>``), in a fixed order.
        labels: each image's label.
        skipped: files in the class folders that are not images by their suffix.
    """

    source: Path
    root: str
    classes: tuple[str, ...]
    names: tuple[str, ...]
    labels: np.ndarray
    skipped: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.names)


def _visible(part: str) -> bool:
    return not part.startswith((".", "__MACOSX"))


def _entries(source: Path) -> Iterator[tuple[PurePosixPath, bool]]:
    """(relative path, is a file) of every entry of a folder or an archive."""
    if source.is_dir():
        for dirpath, dirnames, filenames in os.walk(source):
            rel = PurePosixPath(Path(dirpath).relative_to(source).as_posix())
            dirnames[:] = sorted(d for d in dirnames if _visible(d))
            for d in dirnames:
                yield rel / d, False
            for f in sorted(filenames):
                if _visible(f):
                    yield rel / f, True
        return
    try:
        with tarfile.open(source, "r:*") as tar:
            for member in tar:
                path = PurePosixPath(member.name)
                if any(not _visible(p) for p in path.parts) or path.is_absolute() or ".." in path.parts:
                    continue
                if member.isdir() or member.isfile():
                    yield path, member.isfile()
                    for parent in list(path.parents)[:-1]:  # archives need not list their folders
                        yield parent, False
    except (tarfile.TarError, OSError, EOFError) as err:
        raise DataError(f"data.path {str(source)!r}: cannot read the archive: {err}") from None


def scan(source: Path) -> ImageList:
    """List the images of a folder or archive and check its layout.

    Raises:
        DataError: unreadable archive, no class folders, fewer than 2 classes, an empty class.
    """
    files: dict[PurePosixPath, None] = {}
    dirs: set[PurePosixPath] = set()
    for path, is_file in _entries(source):
        if is_file:
            files[path] = None
        elif str(path) != ".":
            dirs.add(path)
    root = PurePosixPath(".")
    while True:  # enter a lone top folder (train/<class>/...)
        subdirs = sorted(d for d in dirs if d.parent == root)
        top_files = [f for f in files if f.parent == root]
        if len(subdirs) == 1 and not top_files and any(d.parent == subdirs[0] for d in dirs):
            root = subdirs[0]
            continue
        break
    class_dirs = sorted(d for d in dirs if d.parent == root)
    where = f"{source}" + ("" if str(root) == "." else f" (inside {root}/)")
    if not class_dirs:
        raise DataError(
            f"data.path {where}: no class folders: an image-folder dataset is <root>/<class name>/<image file>"
        )
    if len(class_dirs) < 2:
        raise DataError(f"data.path {where}: a classification dataset needs at least 2 class folders; found only "
                        f"{class_dirs[0].name!r}")
    names: list[str] = []
    labels: list[int] = []
    skipped: list[str] = []
    by_class: dict[str, list[PurePosixPath]] = {d.name: [] for d in class_dirs}
    for f in files:
        if root != PurePosixPath(".") and root not in f.parents:
            continue
        rel = f.relative_to(root)
        if len(rel.parts) >= 2 and rel.parts[0] in by_class:  # <class>/<file>, or deeper inside the class
            by_class[rel.parts[0]].append(rel)
    for label, d in enumerate(class_dirs):
        members = sorted(by_class[d.name])
        images = [f for f in members if f.suffix.lower() in IMAGE_SUFFIXES]
        skipped += [str(f) for f in members if f.suffix.lower() not in IMAGE_SUFFIXES]
        if not images:
            raise DataError(f"data.path {where}: class folder {d.name!r} has no images ({', '.join(IMAGE_SUFFIXES)})")
        names += [str(f) for f in images]
        labels += [label] * len(images)
    return ImageList(
        source=source, root="" if str(root) == "." else str(root), classes=tuple(d.name for d in class_dirs),
        names=tuple(names), labels=np.asarray(labels, dtype=np.int64), skipped=tuple(skipped),
    )


def decode_image(data: bytes, resolution: int) -> np.ndarray | None:
    """One image as ``uint8`` ``(3, R, R)`` RGB (resized with Pillow's bilinear filter); None when unreadable."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            rgb = im.convert("RGB")
            if rgb.size != (resolution, resolution):
                rgb = rgb.resize((resolution, resolution), Image.Resampling.BILINEAR)
            return np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1).copy()
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError):
        return None


def _decode_chunk(chunk: list[bytes], resolution: int) -> list[np.ndarray | None]:
    return [decode_image(b, resolution) for b in chunk]


def read_bytes(images: ImageList) -> Iterator[bytes]:
    """The raw bytes of every image of ``images``, in its order."""
    prefix = PurePosixPath(images.root) if images.root else None
    if images.source.is_dir():
        base = images.source / images.root if images.root else images.source
        for name in images.names:
            yield (base / name).read_bytes()
        return
    wanted = {str(prefix / n) if prefix else n: i for i, n in enumerate(images.names)}
    found: list[bytes | None] = [None] * len(images.names)
    with tarfile.open(images.source, "r:*") as tar:  # one sequential pass: gzip has no random access
        for member in tar:
            i = wanted.get(str(PurePosixPath(member.name)))
            if i is not None and member.isfile():
                f = tar.extractfile(member)
                found[i] = f.read() if f is not None else b""
    for b in found:
        yield b if b is not None else b""


def decode_all(
    images: ImageList, resolution: int, workers: int | None = None, max_bad_fraction: float = 0.01,
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Decode every image in parallel processes.

    Args:
        images: the listed images.
        resolution: side length of the decoded images.
        workers: decoding processes (None: the usable CPUs).
        max_bad_fraction: the largest share of skipped files (unreadable images and files that
            are not images) accepted; more is an error.

    Returns:
        ``uint8`` images ``(N, 3, R, R)``, their labels, and the names of the files skipped.

    Raises:
        DataError: more than ``max_bad_fraction`` of the files were skipped.
    """
    n_workers = workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    x = np.empty((len(images), 3, resolution, resolution), dtype=np.uint8)
    ok = np.zeros(len(images), dtype=bool)
    chunks: list[list[bytes]] = [[]]
    for data in read_bytes(images):
        if len(chunks[-1]) == _CHUNK:
            chunks.append([])
        chunks[-1].append(data)
    if n_workers > 1 and len(images) > _CHUNK:
        with ProcessPoolExecutor(max_workers=n_workers) as pool:
            decoded = list(pool.map(_decode_chunk, chunks, [resolution] * len(chunks)))
    else:
        decoded = [_decode_chunk(c, resolution) for c in chunks]
    i = 0
    for chunk in decoded:
        for img in chunk:
            if img is not None:
                x[i] = img
                ok[i] = True
            i += 1
    bad = [n for n, good in zip(images.names, ok, strict=True) if not good] + list(images.skipped)
    report_skipped(images.source, bad, len(images) + len(images.skipped), max_bad_fraction)
    return x[ok], images.labels[ok], bad


def report_skipped(source: Path, bad: Sequence[str], total: int, max_bad_fraction: float) -> None:
    """Log the files skipped (a count and the first few names); raise when there are too many.

    Raises:
        DataError: more than ``max_bad_fraction`` of ``total`` were skipped.
    """
    if not bad:
        return
    first = ", ".join(bad[:5]) + (", ..." if len(bad) > 5 else "")
    share = len(bad) / max(total, 1)
    if share > max_bad_fraction:
        raise DataError(
            f"data.path {str(source)!r}: {len(bad)} of {total} files ({100 * share:.1f}%) are not readable images "
            f"(first: {first}); more than data.max_bad_fraction={max_bad_fraction:g}: check the dataset, or raise "
            "the limit to skip them"
        )
    log.warning("data.path %s: skipped %d of %d files that are not readable images (first: %s)", source, len(bad),
                total, first)
