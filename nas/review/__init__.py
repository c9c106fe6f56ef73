"""Reviewing a finished search: the leaderboard and its Pareto plot (``python -m nas.leaderboard``).

* :mod:`nas.review.leaderboard`: the ranked candidates of a search, as a table, CSV or JSON;
* :mod:`nas.review.plot`: the Pareto plot.

Exporting a winner is :mod:`nas.deploy.export`.
"""
