"""``python -m nas.leaderboard``: the best candidates of a search, from its MLflow record.

The command line is :func:`nas.cli.leaderboard_main`; the review is
:func:`nas.review.leaderboard.run_leaderboard`.
"""

from __future__ import annotations

from nas.cli import leaderboard_main

if __name__ == "__main__":
    leaderboard_main()
