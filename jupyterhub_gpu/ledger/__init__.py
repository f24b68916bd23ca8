"""The ledger: every table, the :class:`~.store.Ledger` and its queries, and the migrations.

Shared by the spawners (in the hub process, which record session starts and stops) and the gpu
service (which meters them). It depends on the pure core (clock, money, billing, session) and nothing
above it: :mod:`.models` (every table), :mod:`.store` (the Ledger), :mod:`.queries` (the other SQL, one
module per concern), :mod:`.batch` (samples written in batches) and the Alembic ``migrations``.
"""
