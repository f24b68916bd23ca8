"""Fixtures of the unit tests: a real ledger on a fresh sqlite file (tests/unit/ledger/ adds PostgreSQL)."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.ledger.store import Ledger


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield ledger
    ledger.close()


@pytest.fixture(autouse=True)
def each_test_is_a_fresh_hub_process():
    """The hub-wide GPU assignments live in module state, as in a hub process (the budget holds are in each
    test's own ledger).

    A test that starts a spawn and leaves its GPU held (its server "runs" to the end of the test) must not
    leave that GPU taken for the next test of the same worker: a later spawn would wait in the queue for it.
    """
    yield
    from jupyterhub_gpu.spawners.assign import cluster, host

    host._ALLOCATORS.clear()
    cluster._ALLOCATORS.clear()
