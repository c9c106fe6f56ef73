"""Reviewing a finished search: the leaderboard and its Pareto plot, and the export of a winner.

* :mod:`nas.review.leaderboard` and :mod:`nas.review.plot`: ``python -m nas.leaderboard``;
* :mod:`nas.review.export`, :mod:`nas.review.export_report`, :mod:`nas.review.fuse`:
  ``python -m nas.export``.
"""
