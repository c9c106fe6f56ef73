"""The predictor's fits on one BLAS thread.

Its least-squares problems are small (a few hundred networks by a few dozen features), solved tens of
thousands of times in a leave-one-out or a bootstrap. Numpy's OpenBLAS starts a thread per core for
each, which gains nothing at that size and costs a lot when the cores are busy: the threads wait for
each other, and a fit beside one other busy process took more than twice as long as on one thread.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from threadpoolctl import threadpool_limits

P = ParamSpec("P")
R = TypeVar("R")


def one_blas_thread(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run with the BLAS libraries held to one thread (restored after it returns)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return wrapper
