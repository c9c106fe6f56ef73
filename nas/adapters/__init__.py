"""One thin module per outside system, and nothing else imports that system.

* :mod:`nas.adapters.ray_tune`: Ray (the cluster, the Tuner, the searcher, driver callbacks);
* :mod:`nas.adapters.optuna_sampler`: Optuna (ask/tell of architectures);
* :mod:`nas.adapters.mlflow_writer` and :mod:`nas.adapters.mlflow_reader`: MLflow, one module
  for every write and one for reading records back.

Hydra, the command line, is the fourth: :mod:`nas.cli`, above everything it calls.
"""
