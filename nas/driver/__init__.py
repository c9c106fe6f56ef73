"""The search: :func:`run_search` checks a configuration, runs the trials on Ray Tune and records them.

* :mod:`nas.driver.run`: the driver;
* :mod:`nas.driver.resume`: continuing a search from its MLflow record;
* :mod:`nas.driver.progress`: the progress bar.
"""

from __future__ import annotations

from nas.driver.run import SearchResult, run_search

__all__ = ["SearchResult", "run_search"]
