"""The search: from a configuration to a recorded, reviewed, exported winner.

The commands (``python -m nas.<command>``) are the top-level modules: :mod:`nas.search`,
:mod:`nas.leaderboard`, :mod:`nas.export`, :mod:`nas.register_predictor`, :mod:`nas.fidelity`,
:mod:`nas.supernet`, :mod:`nas.optimize`, and :mod:`nas.api` for Python; their command line is
:mod:`nas.cli` (Hydra). Below them, one subpackage per concern, imports running downwards only:

* :mod:`nas.deploy`: the export of a candidate (fusion, checks, report) and its deployment
  variants (INT8, FP16, pruned);
* :mod:`nas.driver`: the search (checks, the trials on Ray Tune, the record, resume);
* :mod:`nas.review`: the leaderboard and its Pareto plot;
* :mod:`nas.studies`: studies of LatNAS's own estimates (the fidelity study);
* :mod:`nas.oneshot`: the weight-sharing supernet: its training (at this level) and its
  checkpoint with a subnet's accuracy (:mod:`nas.oneshot.subnet`, below :mod:`nas.trial`, which uses it);
* :mod:`nas.adapters`: one thin module per outside system (Ray's cluster and its Tuner, Optuna,
  MLflow writer and reader);
* :mod:`nas.trial`: what one trial does (build, time, train or score, reward), without Ray;
* :mod:`nas.accuracy`: how good a network is: brief training, augmentation, zero-cost scores,
  accuracy at the deployment precision;
* :mod:`nas.data`: the proxy task's datasets;
* :mod:`nas.core`: the plain types and pure logic every part shares: configuration schemas,
  errors, the reward, the candidate record with its ranking and Pareto front, the table.
"""
