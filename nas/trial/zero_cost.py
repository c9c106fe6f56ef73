"""Training-free accuracy estimates (zero-cost proxies): a score of the network at initialisation.

:func:`naswot_score`: NASWOT (Mellor et al., "Neural Architecture Search without Training",
ICML 2021): the log-determinant of the kernel of binary activation codes of one minibatch at
initialisation. Higher is better; it is not an accuracy, and the search records which estimator
produced the number.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from nas.core.errors import ProxyError
from nas.data import Dataset

_ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU)


def naswot_score(model: nn.Module, data: Dataset, batch_size: int, device: torch.device, seed: int = 0) -> float:
    """NASWOT score of ``model`` at initialisation on one training minibatch.

    Each activation layer's output is binarised (unit active or not) per image; the kernel
    ``K[i, j]`` counts the units on which images ``i`` and ``j`` agree, summed over layers;
    the score is ``log|det K|``.

    Raises:
        ProxyError: the network has no activation layer, or the kernel is singular.
    """
    n = min(batch_size, len(data.y_train))
    idx = np.sort(np.random.default_rng(seed).permutation(len(data.y_train))[:n])
    x = data.batch(data.x_train[idx], device)
    kernel = torch.zeros(n, n, dtype=torch.float64, device=device)

    def hook(_m: nn.Module, _inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal kernel
        c = (out.detach().flatten(1) > 0).double()
        kernel += c @ c.T + (1.0 - c) @ (1.0 - c).T

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, _ACTIVATIONS)]
    if not handles:
        raise ProxyError("naswot needs activation layers (ReLU, ReLU6, Hardswish or SiLU); the network has none")
    model.to(device).train()
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    sign, logdet = torch.linalg.slogdet(kernel)
    if float(sign) <= 0 or not math.isfinite(float(logdet)):
        raise ProxyError("naswot kernel is singular for this network and batch (identical activation codes)")
    return float(logdet)
