"""The proxy task: datasets loaded once in the driver and shipped to every trial.

* :mod:`nas.data.datasets`: the sources (digits, CIFAR-10 batches, image folders and archives),
  the seeded stratified split, and the in-memory :class:`Dataset`;
* :mod:`nas.data.images`: listing and checking image folders and archives, parallel decoding;
* :mod:`nas.data.cache`: decoded datasets cached by content and resolution;
* :mod:`nas.data.stream`: :class:`StreamedDataset`, for datasets read from disk by each trial.
"""

from __future__ import annotations

from nas.data.datasets import CIFAR10_TRAIN, Dataset, ProxyData, load_dataset, split_indices
from nas.data.images import IMAGE_SUFFIXES
from nas.data.stream import StreamedDataset

__all__ = ["CIFAR10_TRAIN", "IMAGE_SUFFIXES", "Dataset", "ProxyData", "StreamedDataset", "load_dataset",
           "split_indices"]
