"""The hub-managed "gpu" service: ledger, metering, budgets, alerts, REST API and metrics.

Run by JupyterHub as ``python -m jupyterhub_gpu.service``. The ledger module is
also used by the spawners in the hub process, which record session starts and
stops directly in the ledger database so that nothing is lost while the service
is down.
"""
