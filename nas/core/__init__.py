"""The plain types and pure logic every part of the search shares; no outside system.

* :mod:`nas.core.config`: the configuration schemas of every command and their checks (the
  groups, one check per group, one module per command);
* :mod:`nas.core.errors`: :class:`~nas.core.errors.NASError` and its subclasses;
* :mod:`nas.core.reward`: accuracy and latency into one number (pure functions of floats);
* :mod:`nas.core.record`: the one :class:`~nas.core.record.Candidate` type, the search record,
  ranking and the Pareto front;
* :mod:`nas.core.sampling`: what a search algorithm is to the driver (ask/tell);
* :mod:`nas.core.evolution`: regularised evolution;
* :mod:`nas.core.table`: the one text table of candidates;
* :mod:`nas.core.paths`: where a project's files go (the ``.latnas`` home) and whether they can.
"""
