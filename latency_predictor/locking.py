"""An exclusive lock on a file, held across processes (and nodes that share the file system)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(path: Path, mode: int = 0o644) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created with ``mode`` if missing) for the block.

    The kernel releases the lock when its holder exits or dies; the file stays, harmlessly.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
