"""What a single-user server is started with besides its environment: kernel culling and its token's scopes."""

from __future__ import annotations


def kernel_cull_args(idle_timeout: int, interval: int, connected: bool) -> list[str]:
    """jupyter_server arguments that shut down kernels idle for ``idle_timeout`` seconds (none for 0).

    An idle TensorFlow kernel lets go of the GPU memory it holds only when it is shut down; busy
    kernels are never culled.
    """
    if not idle_timeout:
        return []
    return [
        f"--MappingKernelManager.cull_idle_timeout={idle_timeout}",
        f"--MappingKernelManager.cull_interval={max(1, interval)}",
        f"--MappingKernelManager.cull_connected={connected}",
        "--MappingKernelManager.cull_busy=False",
    ]


def server_token_scopes(reaches_gpu_service: bool) -> list[str]:
    """The server's token: JupyterHub's "server" role, plus what the server extension needs.

    It reaches the gpu service (samples, budget, notices) when there is one, and may stop its own
    server ("Stop my server").
    """
    scopes = ["users:activity!user", "access:servers!server", "servers!server"]
    if reaches_gpu_service:
        scopes.append("access:services!service=gpu")
    return scopes
