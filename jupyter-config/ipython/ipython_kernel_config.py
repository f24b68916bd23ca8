# jupyterhub-gpu: every IPython kernel applies the server's GPU memory cap when it starts (a time-sliced
# share of a GPU, or a MIG slice; nothing happens on a whole GPU or without one).
#
# The wheel installs this file as <sys.prefix>/etc/ipython/ipython_kernel_config.py (pyproject.toml,
# shared-data), which IPython reads for every kernel of that Python environment: the demo's venv and the
# images' /opt/venv alike. It loads jupyterhub_gpu.serverext.memcap as an IPython extension, which
# configures TensorFlow and PyTorch when the notebook imports them (docs/images.md, "The GPU memory cap").
# `append` keeps the extensions other configuration files list; a user's own
# ~/.ipython/profile_default/ipython_kernel_config.py that *assigns* c.IPKernelApp.extensions replaces
# this list (use .append there too).
c = get_config()  # noqa: F821
c.IPKernelApp.extensions.append("jupyterhub_gpu.serverext.memcap")
