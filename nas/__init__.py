"""The search: from a configuration to a recorded, reviewed, exported winner.

The commands (``python -m nas.<command>``) are the top-level modules: :mod:`nas.search`,
:mod:`nas.leaderboard`, :mod:`nas.export`, :mod:`nas.register_predictor`; their command line is
:mod:`nas.cli` (Hydra). Below them, one subpackage per concern, imports running downwards only:

* :mod:`nas.driver`: the search (checks, the trials on Ray Tune, the record, resume);
* :mod:`nas.review`: the leaderboard, its Pareto plot and the export;
* :mod:`nas.adapters`: one thin module per outside system (Ray, Optuna, MLflow writer and reader);
* :mod:`nas.trial`: what one trial does (build, time, train or score, reward), without Ray;
* :mod:`nas.accuracy`: how good a network is: brief training, zero-cost scores, accuracy at the
  deployment precision;
* :mod:`nas.data`: the proxy task's datasets;
* :mod:`nas.core`: the plain types and pure logic every part shares: configuration schemas,
  errors, the reward, the candidate record with its ranking and Pareto front, the table.
"""
