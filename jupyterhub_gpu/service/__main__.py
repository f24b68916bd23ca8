"""``python -m jupyterhub_gpu.service``: run the gpu service (JupyterHub starts it)."""

from jupyterhub_gpu.service.app import main

if __name__ == "__main__":
    main()
