"""A cache of decoded datasets, so that the second search on the same data starts in seconds.

An image-folder dataset decoded at one resolution is stored as ``uint8`` arrays in one ``.npz``
file (no pickles: ``numpy.load`` with ``allow_pickle=False``) plus a small JSON description,
under a key made of the data's *content* and the resolution: the SHA-256 of an archive's bytes,
or of a folder's listing (relative paths, sizes and modification times). Changing any file, the
resolution or this loader's format gives a new key; a stale entry is never reused.

The folder is ``data.cache_dir``, else ``$LATNAS_CACHE_DIR/datasets``, else
``~/.cache/latnas/datasets``. Writes go to a temporary file renamed into place, so two searches
starting at once on the same data never read a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nas.core.errors import DataError

FORMAT = 1
"""Bumped whenever the decoded arrays would differ (resizing, channel order): old entries are then ignored."""
CACHE_ENV = "LATNAS_CACHE_DIR"


def cache_dir(configured: str | None = None) -> Path:
    """Where decoded datasets are kept (see the module's text)."""
    if configured:
        return Path(configured).expanduser().resolve()
    base = os.environ.get(CACHE_ENV)
    return (Path(base) if base else Path.home() / ".cache" / "latnas") / "datasets"


def content_digest(source: Path) -> str:
    """SHA-256 of an archive's bytes, or of a folder's listing (paths, sizes, modification times)."""
    h = hashlib.sha256()
    if source.is_file():
        with source.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            st = p.stat()
            h.update(f"{p.relative_to(source).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """Where one decoded dataset is (or would be) kept."""

    folder: Path
    key: str

    @property
    def arrays(self) -> Path:
        """The ``.npz`` file of images and labels."""
        return self.folder / f"{self.key}.npz"

    @property
    def info(self) -> Path:
        """The JSON description (source, classes, skipped files)."""
        return self.folder / f"{self.key}.json"

    def load(self) -> tuple[np.ndarray, np.ndarray, dict[str, Any]] | None:
        """The cached images, labels and description; None when not cached (or unreadable)."""
        if not (self.arrays.is_file() and self.info.is_file()):
            return None
        try:
            info = json.loads(self.info.read_text())
            with np.load(self.arrays, allow_pickle=False) as z:
                x, y = z["x"], z["y"]
        except (OSError, ValueError, KeyError, json.JSONDecodeError):
            return None  # a damaged entry is decoded again and replaced
        if info.get("format") != FORMAT or len(x) != len(y) or x.dtype != np.uint8:
            return None
        return x, y, info

    def store(self, x: np.ndarray, y: np.ndarray, info: dict[str, Any]) -> None:
        """Write the entry atomically (a temporary file renamed into place).

        Raises:
            DataError: the cache folder cannot be written.
        """
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.folder, suffix=".npz.tmp", delete=False) as f:
                np.savez(f, x=x, y=y)
            os.replace(f.name, self.arrays)
            tmp = self.info.with_suffix(".json.tmp")
            tmp.write_text(json.dumps({**info, "format": FORMAT}, indent=1))
            os.replace(tmp, self.info)
        except OSError as err:
            raise DataError(
                f"cannot write the dataset cache in {str(self.folder)!r} ({err.strerror or err}); set data.cache_dir "
                f"or ${CACHE_ENV} to a folder you can write"
            ) from None


def entry_for(source: Path, resolution: int, configured_dir: str | None = None) -> CacheEntry:
    """The cache entry of ``source`` decoded at ``resolution``."""
    key = f"{content_digest(source)[:24]}-r{resolution}-f{FORMAT}"
    return CacheEntry(cache_dir(configured_dir), key)
