"""jupyterhub-gpu: per-minute-billed GPU notebook sessions for JupyterHub."""

__version__ = "0.1.0"
