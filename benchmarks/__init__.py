"""The benchmark suite: named benchmarks that print their figures and write JSON records,
and the renderer that turns the records into ``BENCHMARKS.md``.

Entry point: ``python scripts/bench.py`` (:func:`benchmarks.suite.main`).
"""
