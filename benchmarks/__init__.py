"""The benchmark suite: named benchmarks that print their figures and write JSON records,
and the renderer that turns the records into ``BENCHMARKS.md`` (the results table) and the
documentation's page of each area (``docs/benchmarks/<area>.md``). One subpackage per area: ``latency``,
``prediction``, ``search``, ``accuracy``, ``deployment``, ``reliability``; each holds its benchmarks' modules,
their hand-written notes (``<name>.md``) and their records (``records/``).

Entry point: ``python scripts/bench.py`` (:func:`benchmarks.suite.main`).
"""
