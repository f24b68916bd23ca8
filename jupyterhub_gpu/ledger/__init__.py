"""The ledger: every table, the :class:`~.store.Ledger` and its queries, and the migrations.

Shared by the spawners (in the hub process, which record session starts and stops) and the gpu
service (which meters them). It depends on the pure core (clock, money, billing) and nothing above it.
"""
