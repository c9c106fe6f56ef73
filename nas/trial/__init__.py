"""What one trial does, independent of Ray: build, time, train or score, reward, report.

* :mod:`nas.trial.evaluate`: the trial boundary (:func:`~nas.trial.evaluate.evaluate_candidate`);
* :mod:`nas.trial.rungs`: multi-fidelity training of one candidate, rung after rung, each rung saved;
* :mod:`nas.trial.custom`: the user's own evaluator (``accuracy=custom``);
* :mod:`nas.trial.faults`: fault injection for reliability tests.

How accuracy is estimated (training, zero-cost scores, the deployment precision) is :mod:`nas.accuracy`;
a subnet's accuracy from a trained supernet's checkpoint is :mod:`nas.oneshot.subnet`.
"""
