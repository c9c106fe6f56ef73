"""The proxy task: datasets loaded once in the driver and shipped to every trial.

* :mod:`nas.data.datasets`: the sources (digits, CIFAR-10 batches, image folders and archives),
  the seeded stratified split, and the in-memory :class:`Dataset`;
* :mod:`nas.data.images`: listing and checking image folders and archives, parallel decoding;
* :mod:`nas.data.cache`: decoded datasets cached by content and resolution;
* :mod:`nas.data.stream`: :class:`StreamedDataset`, for datasets read from disk by each trial;
* :mod:`nas.data.custom`: :class:`UserData`, the user's own datasets (``data=custom``).
"""

from __future__ import annotations

from nas.core.config import DataConfig
from nas.data.custom import UserData, load_user_data
from nas.data.datasets import CIFAR10_TRAIN, Dataset, ProxyData, load_dataset, split_indices
from nas.data.images import IMAGE_SUFFIXES
from nas.data.stream import StreamedDataset

TaskData = ProxyData | UserData
"""What a search's candidates are trained and evaluated on: built-in images, or the user's datasets."""


def load_task(cfg: DataConfig) -> TaskData:
    """The search's data: the user's datasets for ``data=custom`` (:func:`load_user_data`), else the
    built-in images (:func:`load_dataset`).

    Raises:
        DataError: built-in data that cannot be read.
        UserCodeError: ``data.fn`` cannot be imported, raises or returns something unusable.
    """
    return load_user_data(cfg) if cfg.name == "custom" else load_dataset(cfg)


__all__ = ["CIFAR10_TRAIN", "IMAGE_SUFFIXES", "Dataset", "ProxyData", "StreamedDataset", "TaskData", "UserData",
           "load_dataset", "load_task", "load_user_data", "split_indices"]
