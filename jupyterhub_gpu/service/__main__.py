"""``python -m jupyterhub_gpu.service``: run the gpu service (JupyterHub starts it)."""

from .app import main

if __name__ == "__main__":
    main()
