"""TensorBoard behind jupyter-server-proxy: the ``jupyter_serverproxy_servers`` entry point.

Each single-user server that has jupyter-server-proxy and TensorBoard installed serves
TensorBoard at ``<server>/tensorboard/``, started on first use and reading the user's log
directory: ``$JUPYTERHUB_GPU_TENSORBOARD_LOGDIR``, by default ``~/work/logs``. JupyterLab shows a
"TensorBoard" launcher item, and the jupyterhub-gpu panel an "Open TensorBoard" button.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import entry_points
from importlib.util import find_spec
from pathlib import Path

from jupyterhub_gpu.env import tensorboard_logdir_from_env

PATH = "tensorboard"
DEFAULT_LOGDIR = "~/work/logs"


def logdir(env=os.environ) -> Path:
    """The directory TensorBoard reads, made if missing."""
    path = Path(os.path.expanduser(tensorboard_logdir_from_env(env) or DEFAULT_LOGDIR))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # TensorBoard shows "no data" for a directory that does not exist
    return path


def available() -> bool:
    """True when this server serves TensorBoard: both packages and this entry point installed (nothing imported)."""
    if find_spec("jupyter_server_proxy") is None or find_spec("tensorboard") is None:
        return False
    return any(ep.name == PATH for ep in entry_points(group="jupyter_serverproxy_servers"))


def tensorboard_url(base_url: str) -> str:
    """The path of TensorBoard under this server's ``base_url``, or "" when it is not available."""
    return f"{base_url.rstrip('/')}/{PATH}/" if available() else ""


def setup_tensorboard() -> dict:
    """The jupyter-server-proxy server spec: TensorBoard on a free loopback port, the user's logs."""
    return {
        "command": [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(logdir()),
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--reload_interval",
            "5",
        ],
        # TensorBoard imports TensorFlow before it listens: give it time on a busy server
        "timeout": 60,
        "absolute_url": False,
        "new_browser_tab": True,
        "launcher_entry": {"enabled": True, "title": "TensorBoard", "category": "Notebook"},
    }
