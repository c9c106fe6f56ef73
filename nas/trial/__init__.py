"""What one trial does, independent of Ray: build, time, train or score, reward, report.

* :mod:`nas.trial.evaluate`: the trial boundary (:func:`~nas.trial.evaluate.evaluate_candidate`);
* :mod:`nas.trial.training`: brief training on the proxy task;
* :mod:`nas.trial.zero_cost`: training-free scores;
* :mod:`nas.trial.faults`: fault injection for reliability tests.
"""
