"""How the tests are shared out between pytest-xdist's workers (``scripts/test.sh`` runs ``-n``).

Under ``--dist loadgroup`` every module is one unit of work, so a module's fixtures (a trained
supernet, a small search) are set up once, and the modules that share the small review search
(``tests/nas/review_search.py``) form one unit, so that search runs once. Modules holding the slow
tests CI runs (marker ``ci``) go first, so a long test does not start last and leave the other worker idle.

The tests that press Ctrl-C start a command the way a terminal does, with SIGINT at its default. A test
run started from a background job (``nohup ... &``, some CI runners) inherits SIGINT ignored, and every
process it starts would inherit that too and sit through Ctrl-C: :func:`pytest_configure` gives the
test processes Python's default handler back, which the commands they start then get as SIGINT's default.
"""

from __future__ import annotations

import signal

import pytest

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


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]
