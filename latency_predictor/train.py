"""``python -m latency_predictor.train``: fit a latency predictor and report it on held-out architectures.

Usage::

    python -m latency_predictor.train --data DIR --out predictor.json [--json [REPORT]]
    python -m latency_predictor.train data=DIR out=predictor.json          # key=value form
    python -m latency_predictor.train --data NEW --adapt-from OTHER.json --shots 20 --out new.json
    python -m latency_predictor.train --data NEW --adapt-from A.json B.json C.json --shots 20 --out new.json
    python -m latency_predictor.train --data DIR --statistic p99 --out p99.json   # a predictor of the tail

The command line is :func:`latency_predictor.cli.train_main`; the fit and its report are
:mod:`latency_predictor.prediction.training`, adapting another device's predictor
(``--adapt-from``) is :mod:`latency_predictor.prediction.transfer`.
"""

from __future__ import annotations

from latency_predictor.cli import train_main

if __name__ == "__main__":
    raise SystemExit(train_main())
