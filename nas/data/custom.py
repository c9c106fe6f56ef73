"""The user's own data (``data=custom data.fn=my_module:datasets``).

The function returns the training and validation datasets, ``torch.utils.data.Dataset`` objects
whose items are ``(input, target)`` pairs: an input is a tensor (or array) ``(C, H, W)``, a target
a class index for the built-in training recipe (``accuracy=train``) or anything a custom evaluator
understands (``accuracy=custom``: a regression target, a mask, ...). It returns them as a pair
``(train, val)`` or as a mapping with ``train`` and ``val`` and, optionally, ``num_classes`` and
``classes``. Keyword arguments come from ``data.options``.

The driver calls the function once, checks what it returned (:func:`load_user_data`) and keeps
only the facts: the reference, the sizes, one input's shape, the number of outputs, the subsets
``data.max_train_samples`` and ``data.max_val_samples`` chose. That :class:`UserData` travels to
the trials, and each trial process calls the function again (once; it is cached per process), so
a dataset that reads files, holds open handles or is too big to ship works as well as one held in
memory. The function must therefore return the same split every time (seed it); a trial that gets
other sizes than the driver did FAILS, naming them.

:class:`UserData` offers the interface of the built-in :class:`~nas.data.Dataset` that the
training recipe and a custom evaluator use: ``train_batches``, ``val_batches``, ``sample_train``,
``normalise``, ``take_train``, the sizes and ``summary``, plus the datasets themselves
(:meth:`UserData.datasets`). Batches come from a ``torch.utils.data.DataLoader`` with the default
collation (``data.loader_workers`` processes; 0: in the trial's own). ``uint8`` inputs are
scaled to [0, 1] and standardised per channel with statistics of a sample of the training set, as
the built-in images are; float inputs are used as they are (normalise them in your dataset).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

from nas.core.config import DataConfig
from nas.core.errors import UserCodeError
from nas.runtime import plugins

KEY = "data.fn"
_STAT_SAMPLE = 2000  # training items the per-channel statistics of uint8 inputs are estimated from
_LOADED: dict[str, tuple[Any, Any]] = {}
"""The datasets this process got from each function (keyed by reference and options)."""


def _cache_key(ref: str, options: Mapping[str, Any]) -> str:
    return json.dumps([ref, dict(options)], sort_keys=True, default=str)


def _as_input(ref: str, value: Any, where: str) -> torch.Tensor:
    try:
        x = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise UserCodeError(KEY, ref, f"{where}: an input must be a tensor or an array (C, H, W), got a "
                            f"{type(value).__name__}") from None
    if x.ndim != 3:
        raise UserCodeError(KEY, ref, f"{where}: an input must have 3 dimensions (C, H, W) as the candidates are "
                            f"convolutional networks, got shape {tuple(x.shape)}")
    return x


def _split(ref: str, out: Any) -> tuple[Any, Any, int | None, Sequence[str] | None]:
    """The training and validation datasets a call returned, and the classes it may name."""
    m = plugins.mapping(out)
    if m is not None:
        missing = [k for k in ("train", "val") if k not in m]
        if missing:
            raise UserCodeError(KEY, ref, f"returned a mapping without {' and '.join(missing)} (it has "
                                f"{', '.join(map(str, m)) or 'nothing'}); return (train, val) or "
                                "{'train': ..., 'val': ...}")
        n = m.get("num_classes")
        classes = m.get("classes")
        return m["train"], m["val"], None if n is None else int(plugins.number(KEY, ref, n, "num_classes")), classes
    if isinstance(out, tuple | list) and len(out) == 2:
        return out[0], out[1], None, None
    raise UserCodeError(KEY, ref, f"returned a {type(out).__name__}; return the training and validation datasets "
                        "as (train, val) or {'train': ..., 'val': ...}")


def _check_dataset(ref: str, ds: Any, which: str) -> int:
    if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
        raise UserCodeError(KEY, ref, f"the {which} dataset is a {type(ds).__name__}, not a map-style "
                            "torch.utils.data.Dataset (with __len__ and __getitem__)")
    n = len(ds)
    if n < 1:
        raise UserCodeError(KEY, ref, f"the {which} dataset is empty")
    return n


def _first_item(ref: str, ds: Any, which: str) -> tuple[torch.Tensor, Any]:
    item = plugins.call(KEY, ref, ds.__getitem__, 0)
    if not (isinstance(item, tuple | list) and len(item) == 2):
        raise UserCodeError(KEY, ref, f"{which}[0] is a {type(item).__name__}; each item must be an "
                            "(input, target) pair")
    return _as_input(ref, item[0], f"{which}[0]"), item[1]


def _channel_stats(ds: Any, n: int, seed: int, ref: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    idx = np.sort(np.random.default_rng(seed).permutation(n)[: min(n, _STAT_SAMPLE)])
    xs = torch.stack([_as_input(ref, plugins.call(KEY, ref, ds.__getitem__, int(i))[0], f"train[{int(i)}]")
                      for i in idx]).double() / 255.0
    mean = xs.mean(dim=(0, 2, 3))
    std = xs.std(dim=(0, 2, 3), unbiased=False).clamp(min=1e-3)
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)


def _subset(n: int, limit: int | None, seed: int) -> np.ndarray | None:
    if limit is None or limit >= n:
        return None
    return np.sort(np.random.default_rng(seed).permutation(n)[:limit])


def load_user_data(cfg: DataConfig) -> UserData:
    """Call ``data.fn`` (in the driver), check what it returned, and describe it.

    Raises:
        UserCodeError: the function cannot be imported, raises, or returns something that is not two
            non-empty datasets of ``(input (C, H, W), target)`` pairs, or the number of outputs is not
            known (set ``data.num_classes``).
    """
    ref = str(cfg.fn)
    fn = plugins.load_function(KEY, ref, from_cwd=True)
    train, val, n_out, classes = _split(ref, plugins.call(KEY, ref, fn, **cfg.options))
    n_train, n_val = _check_dataset(ref, train, "training"), _check_dataset(ref, val, "validation")
    x, _ = _first_item(ref, train, "train")
    xv, _ = _first_item(ref, val, "val")
    if xv.shape != x.shape:
        raise UserCodeError(KEY, ref, f"training inputs are {tuple(x.shape)} but validation inputs "
                            f"{tuple(xv.shape)}; they must match")
    if classes is None and isinstance(getattr(train, "classes", None), Sequence):
        classes = train.classes
    num_classes = cfg.num_classes or n_out or (len(classes) if classes else None)
    if not num_classes:
        raise UserCodeError(KEY, ref, "the number of outputs is not known: set data.num_classes=<N> (classes, or "
                            "regression targets), or return it as {'train': ..., 'val': ..., 'num_classes': N}")
    names = tuple(str(c) for c in classes) if classes and len(classes) == num_classes else tuple(
        str(i) for i in range(num_classes))
    mean = std = None
    if x.dtype == torch.uint8:
        mean, std = _channel_stats(train, n_train, cfg.seed, ref)
    _LOADED[_cache_key(ref, cfg.options)] = (train, val)
    return UserData(
        source=ref, options=dict(cfg.options), num_classes=int(num_classes), classes=names,
        input_shape=tuple(int(d) for d in x.shape), input_dtype=str(x.dtype).removeprefix("torch."),
        total_train=n_train, total_val=n_val,
        train_index=_subset(n_train, cfg.max_train_samples, cfg.seed),
        val_index=_subset(n_val, cfg.max_val_samples, cfg.seed), mean=mean, std=std,
        mirror_invariant=cfg.mirror_invariant, loader_workers=cfg.loader_workers,
    )


@dataclass(frozen=True)
class UserData:
    """The user's datasets as a proxy task (see the module's text): facts only, the datasets are
    fetched in each process from the function that made them.

    Attributes:
        source: the function, ``module:function``.
        options: its keyword arguments (``data.options``).
        num_classes: the candidates' outputs.
        classes: their names (``0``, ``1``, ... when not given).
        input_shape: one input's shape ``(C, H, W)``.
        input_dtype: its dtype (``uint8`` inputs are scaled and standardised).
        total_train: items of the whole training dataset.
        total_val: items of the whole validation dataset.
        train_index: the training items used (None: all).
        val_index: the validation items used (None: all).
        mean: per-channel mean of ``uint8`` inputs scaled to [0, 1] (None: float inputs, used as they are).
        std: their per-channel standard deviation.
        mirror_invariant: whether a mirrored input shows the same target (``train.augment`` flips).
        loader_workers: DataLoader processes per trial (0: the trial's own).
    """

    source: str
    options: dict[str, Any]
    num_classes: int
    classes: tuple[str, ...]
    input_shape: tuple[int, ...]
    input_dtype: str
    total_train: int
    total_val: int
    train_index: np.ndarray | None = None
    val_index: np.ndarray | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    mirror_invariant: bool = True
    loader_workers: int = 0

    name = "custom"
    streamed = False
    images = False
    """Not known to be images: ``train.augment=auto`` does not augment them (name a crop to have one)."""

    # ------------------------------------------------------------------ the datasets
    def datasets(self) -> tuple[Any, Any]:
        """The whole training and validation datasets, as the function returned them (one call per process).

        Raises:
            UserCodeError: the function cannot be imported or raises here, or returned other sizes than
                it did in the driver.
        """
        key = _cache_key(self.source, self.options)
        if key not in _LOADED:
            fn = plugins.load_function(KEY, self.source)
            train, val, _, _ = _split(self.source, plugins.call(KEY, self.source, fn, **self.options))
            got = (_check_dataset(self.source, train, "training"), _check_dataset(self.source, val, "validation"))
            if got != (self.total_train, self.total_val):
                raise UserCodeError(KEY, self.source, f"returned {got[0]} training and {got[1]} validation items here "
                                    f"but {self.total_train} and {self.total_val} in the driver; it must return the "
                                    "same split every time (seed it)")
            _LOADED[key] = (train, val)
        return _LOADED[key]

    @property
    def train_set(self) -> TorchDataset[Any]:
        """The training items used (``data.max_train_samples``, a rung's share), as a dataset."""
        train = self.datasets()[0]
        return train if self.train_index is None else torch.utils.data.Subset(train, self.train_index.tolist())

    @property
    def val_set(self) -> TorchDataset[Any]:
        """The validation items used, as a dataset."""
        val = self.datasets()[1]
        return val if self.val_index is None else torch.utils.data.Subset(val, self.val_index.tolist())

    def check_class_targets(self) -> None:
        """The first training and validation targets are class indices in ``[0, num_classes)``, as the
        built-in training recipe (cross-entropy) needs.

        Raises:
            UserCodeError: a target that is not an integer class index (a regression target needs
                ``accuracy=custom``), or one out of range.
        """
        train, val = self.datasets()
        for which, ds in (("train", train), ("val", val)):
            _, y = _first_item(self.source, ds, which)
            t = torch.as_tensor(y)
            if t.ndim != 0 or t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
                raise UserCodeError(KEY, self.source, f"{which}[0]'s target is {str(y)[:60]!r} ({type(y).__name__}); "
                                    "the built-in training recipe (accuracy=train) needs a class index: for other "
                                    "targets score the candidates yourself with accuracy=custom")
            if not 0 <= int(t) < self.num_classes:
                raise UserCodeError(KEY, self.source, f"{which}[0]'s target is class {int(t)}, outside "
                                    f"[0, {self.num_classes}) (num_classes {self.num_classes}); set data.num_classes")

    # ------------------------------------------------------------------ the proxy task's interface
    @property
    def resolution(self) -> int:
        """The inputs' height (augmentation's crop size)."""
        return int(self.input_shape[-2])

    @property
    def n_train(self) -> int:
        """Training items used."""
        return self.total_train if self.train_index is None else len(self.train_index)

    @property
    def n_val(self) -> int:
        """Validation items used."""
        return self.total_val if self.val_index is None else len(self.val_index)

    def _batches(self, ds: TorchDataset[Any], order: Sequence[int], batch_size: int,
                 device: torch.device | str) -> Iterator[tuple[Any, Any]]:
        dev = torch.device(device)
        loader = DataLoader(torch.utils.data.Subset(ds, list(order)), batch_size=batch_size, shuffle=False,
                            num_workers=self.loader_workers, pin_memory=dev.type == "cuda")
        batches = iter(loader)
        while True:
            # Each batch runs the dataset's own code (__getitem__, its transforms): its failures are the user's.
            batch = plugins.call(KEY, self.source, next, batches, None)
            if batch is None:
                return
            if not (isinstance(batch, tuple | list) and len(batch) == 2 and isinstance(batch[0], torch.Tensor)):
                raise UserCodeError(KEY, self.source, "a batch is not (inputs, targets) with inputs a tensor: each "
                                    "item must be an (input, target) pair of tensors or numbers")
            x, y = batch
            yield x.to(dev, non_blocking=True), (y.to(dev, non_blocking=True) if isinstance(y, torch.Tensor) else y)

    def train_batches(self, batch_size: int, rng: np.random.Generator,
                      device: torch.device | str = "cpu") -> Iterator[tuple[Any, Any]]:
        """One epoch of training batches ``(inputs, targets)`` in a random order (``rng``)."""
        return self._batches(self.train_set, rng.permutation(self.n_train).tolist(), batch_size, device)

    def val_batches(self, batch_size: int, device: torch.device | str = "cpu") -> Iterator[tuple[Any, Any]]:
        """The validation items in batches, in order."""
        return self._batches(self.val_set, range(self.n_val), batch_size, device)

    def sample_train(self, n: int, seed: int, device: torch.device | str = "cpu") -> tuple[Any, Any]:
        """``n`` training items chosen with ``seed``, as one batch."""
        idx = np.sort(np.random.default_rng(seed).permutation(self.n_train)[: min(n, self.n_train)])
        return next(iter(self._batches(self.train_set, idx.tolist(), len(idx), device)))

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """Inputs as the network takes them: ``uint8`` scaled and standardised, float as they are."""
        if x.dtype != torch.uint8:
            return x.float()
        out = x.float().div_(255.0)
        if self.mean is None or self.std is None:
            return out
        shape = (1, len(self.mean), *([1] * (x.ndim - 2)))
        m = torch.tensor(self.mean, device=x.device).view(shape)
        s = torch.tensor(self.std, device=x.device).view(shape)
        return (out - m) / s

    def take_train(self, n: int, seed: int) -> UserData:
        """The same task with ``n`` of its training items chosen with ``seed`` (all when ``n`` is larger)."""
        if n >= self.n_train:
            return self
        pick = np.sort(np.random.default_rng(seed).permutation(self.n_train)[:n])
        base = np.arange(self.total_train) if self.train_index is None else self.train_index
        return replace(self, train_index=base[pick])

    def shard(self, rank: int, world: int) -> UserData:
        """Training items ``rank``, ``rank + world``, ... (one process's share); the validation items whole."""
        base = np.arange(self.total_train) if self.train_index is None else self.train_index
        return replace(self, train_index=base[rank::world])

    def summary(self) -> dict[str, Any]:
        """Sizes and source, for the search record."""
        return {"name": self.name, "source": self.source, "train": self.n_train, "val": self.n_val,
                "classes": self.num_classes, "input_shape": list(self.input_shape)}
