"""Suite-wide settings for running the tests in parallel with pytest-xdist.

``scripts/test.sh`` runs the suite with ``--dist loadgroup`` on one worker per CPU and one
more (``DANLU_TEST_WORKERS`` says otherwise): pytest-xdist hands each
``xdist_group`` to one worker as a whole. Every module is its own group here, so its
module-scoped fixtures (a server, a traced model, a simulated trace) are built once and its
tests run in file order; modules that name a group themselves (the Ray and the Slurm clusters)
keep it, so that two such clusters never run at once. Without xdist the marks do nothing.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every test without an ``xdist_group`` in the group of its module's file."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
