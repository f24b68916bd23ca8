"""Fixtures of the unit tests: a real ledger on a fresh sqlite file (tests/unit/ledger/ adds PostgreSQL)."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.ledger.store import Ledger


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield ledger
    ledger.close()
