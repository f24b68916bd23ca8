"""The rules of the gpu service as pure functions: metering, budgets, culling, savings, advice, jobs, overrides.

They take plain values and ``now``; the web layer and the tick call them.
"""
