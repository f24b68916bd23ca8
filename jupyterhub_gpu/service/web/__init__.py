"""The web layer of the gpu service: auth and scopes, parameters, JSON/CSV views, REST API, pages, /metrics.

It imports the domain and the ledger, never the other way.
"""
