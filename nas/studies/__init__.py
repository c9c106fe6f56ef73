"""Studies of LatNAS's own estimates, run as commands of their own.

* :mod:`nas.studies.fidelity`: ``python -m nas.fidelity``, how well cheap accuracy estimates rank
  architectures against real training;
* :mod:`nas.studies.stats`: rank agreement with bootstrap confidence intervals.
"""
