"""One-shot accuracy: training a weight-sharing supernet (``python -m nas.supernet``).

* :mod:`nas.oneshot.train`: the training (sandwich rule, in-place distillation, the ``train``
  recipe, a checkpoint every epoch, resumable, recorded in MLflow);
* :mod:`nas.oneshot.distributed`: data-parallel training over processes started by ``torchrun``.

The supernet itself is :mod:`search_spaces.supernet`; its checkpoint and the accuracy of one of
its subnets, which the search, the export and the fidelity study use, are :mod:`nas.trial.subnet`.
"""
