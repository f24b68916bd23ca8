"""Every table of the ledger in one metadata, for the migrations.

The tables are declared next to the code that owns them (``ledger``, ``access``, ``jobs``, ``advice``), on
the one ``ledger.Base``; a table joins ``Base.metadata`` only when its module is imported. Alembic's
environment imports this module, so that ``alembic revision --autogenerate`` compares the database with
every table, not only those some earlier import happened to load (it proposed dropping the jobs and
price-override tables).
"""

from __future__ import annotations

from jupyterhub_gpu.ledger.store import Base
from jupyterhub_gpu.service.domain import advice, jobs, overrides  # noqa: F401  (imported for their tables)

metadata = Base.metadata
