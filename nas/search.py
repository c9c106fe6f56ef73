"""``python -m nas.search +space=mobile target_ms=50``: search a space for the best network at a latency target.

The command line is :func:`nas.cli.search_main`; the search itself is :func:`nas.driver.run_search`.
"""

from __future__ import annotations

from nas.cli import search_main

if __name__ == "__main__":
    search_main()
