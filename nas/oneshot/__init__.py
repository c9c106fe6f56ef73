"""One-shot accuracy: a weight-sharing supernet, its training (``python -m nas.supernet``) and its
checkpoint.

* :mod:`nas.oneshot.train`: the training (sandwich rule, in-place distillation, the ``train``
  recipe, a checkpoint every epoch, resumable, recorded in MLflow);
* :mod:`nas.oneshot.distributed`: data-parallel training over processes started by ``torchrun``;
* :mod:`nas.oneshot.subnet`: the checkpoint, what it is for, and the accuracy of one of its
  subnets, which the search's trials (``accuracy=supernet``), the export and the fidelity study use.

The supernet itself is :mod:`search_spaces.supernet`. The checkpoint module and the data-parallel
machinery sit below :mod:`nas.trial` in the import layers (a trial reads the checkpoint); the
training sits above it, beside the other commands' packages (it records its run in MLflow).
"""
