"""How the tests are shared out between pytest-xdist's workers (``scripts/test.sh`` runs ``-n``).

Under ``--dist loadgroup`` every module is one unit of work, so a module's fixtures (a trained
supernet, a small search) are set up once, and the modules that share the small review search
(``tests/nas/review_search.py``) form one unit, so that search runs once. Modules holding the slow
tests CI runs (marker ``ci``) go first, so a long test does not start last and leave the other worker idle.

The tests that press Ctrl-C start a command the way a terminal does, with SIGINT at its default. A test
run started from a background job (``nohup ... &``, some CI runners) inherits SIGINT ignored, and every
process it starts would inherit that too and sit through Ctrl-C: :func:`pytest_configure` gives the
test processes Python's default handler back, which the commands they start then get as SIGINT's default.

The tests train as a search's trials do: on an x86-64 CPU with oneDNN held at AVX2, so in channels-last
(:func:`nas.accuracy.training.trial_environment`). oneDNN reads the cap once, before its first kernel,
so it is set here, before any test runs, and the test processes and everything they start inherit it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
import torch

from nas.accuracy.training import trial_environment
from nas.core.config import TrainConfig

os.environ.update(trial_environment(TrainConfig(), times_torch_on_cpu=False))  # empty where the user set the cap

SHARED_SEARCH_FIXTURE = "small_search"


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist turns the groups into its units of work
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the controller has --dist; its workers are told by the `loadgroup` flag
    if getattr(config.option, "dist", "no") != "loadgroup" and not getattr(config.option, "loadgroup", False):
        return
    shared = {_module(i) for i in items if SHARED_SEARCH_FIXTURE in getattr(i, "fixturenames", ())}
    slow = {_module(i) for i in items if i.get_closest_marker("ci")}
    for item in items:
        item.add_marker(pytest.mark.xdist_group("review-search" if _module(item) in shared else _module(item)))
    items.sort(key=lambda item: _module(item) not in slow)  # stable: slow modules first


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Small networks on a shared machine: one torch thread is many times faster than two fighting
    (``pytestmark = pytest.mark.usefixtures("one_torch_thread")`` in the modules that train them)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]
