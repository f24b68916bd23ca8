# Defaults of the single-user server in the jupyterhub-gpu TensorFlow image
# (/opt/venv/etc/jupyter/jupyter_server_config.py). Command-line options from the spawner win.
c = get_config()  # noqa: F821

# Kernel culling: an idle kernel lets go of the GPU memory TensorFlow holds. A busy kernel (a
# training run) is never culled; the spawner's kernel_cull_idle_timeout overrides these.
c.MappingKernelManager.cull_idle_timeout = 1800
c.MappingKernelManager.cull_interval = 60
c.MappingKernelManager.cull_connected = False
c.MappingKernelManager.cull_busy = False

# Stopping the server (cull, budget, admin, "Stop my server", a preempted node) interrupts each
# kernel at once, asks it to shut down, sends SIGTERM after half of shutdown_wait_time and SIGKILL
# after all of it. jupyterhub_gpu.keras.CheckpointAndResume saves on that interrupt, so the time
# must fit in the container's stop grace period (Docker's default: 10 s); 8 s leaves the server
# 2 s to exit. Raise both together for models whose checkpoint takes longer.
c.KernelManager.shutdown_wait_time = 8.0
