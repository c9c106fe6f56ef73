"""How the tests are shared out between pytest-xdist's workers (``scripts/test.sh`` runs ``-n``).

Under ``--dist loadgroup`` every module is one unit of work, so a module's fixtures (a trained
supernet, a small search) are set up once, and the modules that share the small review search
(``tests/nas/review_search.py``) form one unit, so that search runs once. Modules holding the slow
tests CI runs (marker ``ci``) go first, so a long test does not start last and leave the other worker idle.
"""

from __future__ import annotations

import pytest

SHARED_SEARCH_FIXTURE = "small_search"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist turns the groups into its units of work
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the controller has --dist; its workers are told by the `loadgroup` flag
    if getattr(config.option, "dist", "no") != "loadgroup" and not getattr(config.option, "loadgroup", False):
        return
    modules = {item.nodeid.split("::")[0] for item in items}
    shared = {m for m in modules if any(SHARED_SEARCH_FIXTURE in getattr(i, "fixturenames", ())
                                        for i in items if i.nodeid.startswith(m + "::"))}
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("ci")}
    for item in items:
        module = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group("review-search" if module in shared else module))
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)  # stable: slow modules first
