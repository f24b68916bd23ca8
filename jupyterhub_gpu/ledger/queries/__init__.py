"""The ledger's SQL outside the :class:`~jupyterhub_gpu.ledger.store.Ledger`, one module per concern.

Each function takes the ledger (for its engine and sessions) and returns rows or plain values; the
service's domain and web layers call these instead of writing SQL themselves. :mod:`.filters` holds
the query narrowings that :mod:`..store` and the other modules share.
"""
