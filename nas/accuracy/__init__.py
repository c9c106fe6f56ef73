"""How good a candidate network is: the accuracy toolkit the trials, the supernet, the studies and
the export share.

* :mod:`nas.accuracy.training`: brief training on the proxy task (the ``train`` recipe), evaluation
  and BatchNorm recalibration;
* :mod:`nas.accuracy.augment`: batch augmentation on the device the network trains on;
* :mod:`nas.accuracy.zero_cost`: training-free scores (zero-cost proxies);
* :mod:`nas.accuracy.precision`: a trained network's accuracy at the deployment precision (int8,
  fp16, bf16).
"""
