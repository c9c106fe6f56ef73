"""One thin module per outside system (two for Ray), and nothing else imports that system.

* :mod:`nas.adapters.ray_cluster` and :mod:`nas.adapters.ray_tune`: Ray, one module for the cluster
  (start or join, resources, runtime environment, authentication, checks on a trial node) and one
  for the Tuner (the trials, the searcher, the scheduler, driver callbacks), which imports the first;
* :mod:`nas.adapters.optuna_sampler`: Optuna (ask/tell of architectures);
* :mod:`nas.adapters.mlflow_writer` and :mod:`nas.adapters.mlflow_reader`: MLflow, one module
  for every write and one for reading records back.

Hydra, the command line, is the fourth: :mod:`nas.cli`, above everything it calls.
"""
