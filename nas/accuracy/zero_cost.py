"""Training-free accuracy estimates (zero-cost proxies): a score of the network at initialisation.

Higher is better for each; none is an accuracy, and the search records which estimator produced
the number. :data:`ZERO_COST` names them:

* ``naswot``: NASWOT (Mellor et al., "Neural Architecture Search without Training", ICML 2021):
  the log-determinant of the kernel of binary activation codes of one minibatch;
* ``synflow``: SynFlow, data-free (Tanaka et al. 2020);
* ``grad_norm``: the norm of the loss gradient on one minibatch (Abdelfattah et al. 2021);
* ``jacob_cov``: the correlation of input Jacobians across a minibatch (Mellor et al. 2020, v1).

How well each ranks networks like real training does is measured by ``python -m nas.fidelity``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from nas.core.errors import ProxyError
from nas.data import ProxyData

_ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU)


def naswot_score(model: nn.Module, data: ProxyData, batch_size: int, device: torch.device, seed: int = 0) -> float:
    """NASWOT score of ``model`` at initialisation on one training minibatch.

    Each activation layer's output is binarised (unit active or not) per image; the kernel
    ``K[i, j]`` counts the units on which images ``i`` and ``j`` agree, summed over layers;
    the score is ``log|det K|``.

    Raises:
        ProxyError: the network has no activation layer, or the kernel is singular.
    """
    xb, _ = data.sample_train(batch_size, seed, device)
    x = data.normalise(xb)
    n = len(x)
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


def synflow_score(model: nn.Module, data: ProxyData, batch_size: int, device: torch.device, seed: int = 0) -> float:
    """SynFlow (Tanaka et al., NeurIPS 2020; as a zero-cost NAS proxy, Abdelfattah et al., ICLR 2021).

    With every parameter replaced by its absolute value and an all-ones input, the score is
    ``sum |theta * dR/dtheta|`` over the weights of convolutions and linear layers, where ``R``
    is the sum of the outputs. It needs no data (``data`` gives only the input's shape). Computed
    in float64 on a copy, in eval mode (BatchNorm at its initial statistics); returned as a
    natural logarithm, which ranks the same and does not overflow.

    Raises:
        ProxyError: the score is zero or not finite.
    """
    import copy

    net = copy.deepcopy(model).to(device).double().eval()
    with torch.no_grad():
        for p in net.parameters():
            p.abs_()
    x = torch.ones(1, 3, data.resolution, data.resolution, dtype=torch.float64, device=device)
    net.zero_grad(set_to_none=True)
    net(x).sum().backward()
    with torch.no_grad():
        value = float(sum(float((m.weight * m.weight.grad).abs().sum()) for m in net.modules()
                          if isinstance(m, nn.Conv2d | nn.Linear) and m.weight.grad is not None))
    if not math.isfinite(value) or value <= 0:
        raise ProxyError(f"synflow score is {value} for this network (it overflowed or no gradient reached a weight)")
    return math.log(value)


def grad_norm_score(model: nn.Module, data: ProxyData, batch_size: int, device: torch.device, seed: int = 0) -> float:
    """Grad-norm (Abdelfattah et al., ICLR 2021): the sum over convolutions and linear layers of the
    Euclidean norm of the cross-entropy loss's gradient on one training minibatch, at initialisation.

    Raises:
        ProxyError: the gradient is not finite.
    """
    xb, y = data.sample_train(batch_size, seed, device)
    model.to(device).train()
    model.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(data.normalise(xb)), y).backward()
    total = sum(float(m.weight.grad.norm()) for m in model.modules()
                if isinstance(m, nn.Conv2d | nn.Linear) and m.weight.grad is not None)
    model.zero_grad(set_to_none=True)
    if not math.isfinite(total):
        raise ProxyError("grad_norm: the gradient is not finite for this network")
    return total


def jacob_cov_score(model: nn.Module, data: ProxyData, batch_size: int, device: torch.device, seed: int = 0) -> float:
    """Jacobian covariance (Mellor et al., "Neural Architecture Search without Training", 2020 v1).

    The input Jacobian of the summed outputs, one row per image of a training minibatch; the score
    is ``-sum(log(v + k) + 1 / (v + k))`` over the eigenvalues ``v`` of the rows' correlation
    matrix (``k = 1e-5``): higher when the network tells images apart.

    Raises:
        ProxyError: the correlation matrix is not finite (e.g. a constant Jacobian).
    """
    xb, _ = data.sample_train(batch_size, seed, device)
    x = data.normalise(xb).requires_grad_(True)
    model.to(device).train()
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    if x.grad is None:
        raise ProxyError("jacob_cov: no gradient reached the input of this network")
    jac = x.grad.detach().flatten(1).double()
    corr = torch.corrcoef(jac)
    if not bool(torch.isfinite(corr).all()):
        raise ProxyError("jacob_cov: the Jacobian's correlation is not finite for this network and batch")
    v = torch.linalg.eigvalsh(corr)
    k = 1e-5
    model.zero_grad(set_to_none=True)
    return float(-torch.sum(torch.log(v.clamp(min=0) + k) + 1.0 / (v.clamp(min=0) + k)))


ZeroCost = Callable[[nn.Module, ProxyData, int, torch.device, int], float]
ZERO_COST: dict[str, ZeroCost] = {
    "naswot": naswot_score, "synflow": synflow_score, "grad_norm": grad_norm_score, "jacob_cov": jacob_cov_score,
}
"""Training-free scores by name (higher is better for each); the search's ``accuracy.estimator`` choices."""


def zero_cost_score(name: str, model: nn.Module, data: ProxyData, batch_size: int, device: torch.device,
                    seed: int = 0) -> float:
    """The training-free score ``name`` of ``model`` at initialisation.

    Raises:
        ProxyError: an unknown name, or the score cannot be computed for this network.
    """
    try:
        fn = ZERO_COST[name]
    except KeyError:
        raise ProxyError(f"unknown training-free score {name!r}; known: {sorted(ZERO_COST)}") from None
    return fn(model, data, batch_size, device, seed)
