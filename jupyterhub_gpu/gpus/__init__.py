"""GPU devices: what a GPU is, how its names and memory sizes are read, and where inventories come from.

Pure and shared by every side (hub, service, user server); imports nothing of ``jupyterhub``.
"""
