"""``python -m latency_predictor.measure ARCH``: measure architectures and print a table.

Usage::

    python -m latency_predictor.measure mobilenetv2_100
    python -m latency_predictor.measure 'act_relu-stem_c16-mb_k3_e4_c24_s2-head_c256' --backend torch
    python -m latency_predictor.measure --space mobile --sample 5 --json results.json
    python -m latency_predictor.measure efficientnet_b0 --breakdown

ARCH is a canonical architecture string or a reference name (``mobilenetv2_100``,
``efficientnet_b0``, ``mnasnet_b1``). Options a backend does not take are refused with the list
of those it does. The command line is :func:`latency_predictor.cli.measure_main`; the measuring
backends are :mod:`latency_predictor.measurement.backends`.
"""

from __future__ import annotations

from latency_predictor.cli import measure_main

if __name__ == "__main__":
    raise SystemExit(measure_main())
