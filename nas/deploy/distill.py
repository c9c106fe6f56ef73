"""Knowledge distillation: the loss a pruned network is fine-tuned with.

Hinton et al. (2015): the student matches the teacher's softened output distribution (softmax at
temperature ``T``) as well as the labels. The soft term's gradients scale as ``1 / T^2``, so it
is multiplied by ``T^2`` to keep its weight independent of the temperature:

    loss = alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T))
           + (1 - alpha) * cross_entropy(student, labels)

The teacher is the candidate's un-pruned FP32 network, in inference mode and never updated; it
sees the very batch the student sees (augmented, normalised).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nas.accuracy.training import LossFn


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor, alpha: float,
                      temperature: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """The hard + soft loss of ``student`` logits against ``labels`` and ``teacher`` logits (see above)."""
    t = temperature
    soft = F.kl_div(F.log_softmax(student / t, dim=1), F.log_softmax(teacher / t, dim=1), reduction="batchmean",
                    log_target=True) * (t * t)
    hard = F.cross_entropy(student, labels, label_smoothing=label_smoothing)
    return alpha * soft + (1.0 - alpha) * hard


def distillation_loss_fn(teacher: nn.Module, alpha: float, temperature: float, label_smoothing: float = 0.0) -> LossFn:
    """A training loss for :func:`nas.accuracy.training.train_briefly` that distils ``teacher`` into the trained
    network.

    The teacher is put in inference mode and moved to each batch's device when first asked.
    """
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)

    def loss(logits: torch.Tensor, labels: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        if next(teacher.parameters()).device != inputs.device:
            teacher.to(inputs.device)
        with torch.no_grad():
            target = teacher(inputs).float()
        return distillation_loss(logits, target, labels, alpha, temperature, label_smoothing)

    return loss
