"""``python -m latency_predictor.collect``: measure architectures covering a space into a latency dataset.

Usage::

    python -m latency_predictor.collect --space mobile --backend onnxruntime --n 300 --out DIR
    python -m latency_predictor.collect +space=mobile latency=onnxruntime n=300     # key=value form
    python -m latency_predictor.collect +space=mobile latency=remote url=http://127.0.0.1:8765 n=300
    python -m latency_predictor.collect --space mobile --n 300 --statistic p99 --out DIR   # for a p99 predictor

``latency=remote`` (``--backend remote --url URL``) measures on another device, through the
measurement agents running there (:mod:`latency_predictor.agent`; the token in
``$LATNAS_AGENT_TOKEN``). ``--adapt-from PREDICTOR`` measures the architectures most informative
for adapting another device's predictor. The command line is
:func:`latency_predictor.cli.collect_main`; which architectures, and how a run resumes, is
:mod:`latency_predictor.prediction.collection`.
"""

from __future__ import annotations

from latency_predictor.cli import collect_main

if __name__ == "__main__":
    raise SystemExit(collect_main())
