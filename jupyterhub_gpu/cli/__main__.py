"""``python -m jupyterhub_gpu.cli``: the ``jupyterhub-gpu`` command."""

from jupyterhub_gpu.cli import run

if __name__ == "__main__":
    run()
