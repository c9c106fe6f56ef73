"""The proxy task: datasets loaded once in the driver and shipped to every trial."""

from __future__ import annotations

from nas.data.datasets import CIFAR10_TEST, CIFAR10_TRAIN, IMAGE_SUFFIXES, Dataset, load_dataset

__all__ = ["CIFAR10_TEST", "CIFAR10_TRAIN", "IMAGE_SUFFIXES", "Dataset", "load_dataset"]
