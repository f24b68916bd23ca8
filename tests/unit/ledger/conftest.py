"""The ledger's own tests run on sqlite and on the test PostgreSQL server."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.ledger.store import Ledger


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    """An empty database: a sqlite file, or a fresh database on the test PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def ledger(db_url):
    ledger = Ledger(db_url)
    yield ledger
    ledger.close()
