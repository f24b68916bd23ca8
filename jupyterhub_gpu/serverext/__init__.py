"""The jupyter_server extension of jupyterhub-gpu: GPU stats and session cost for the Lab extension."""


def _jupyter_server_extension_points():
    return [{"module": "jupyterhub_gpu.serverext"}]


def _load_jupyter_server_extension(serverapp):
    from jupyterhub_gpu.serverext.extension import load

    serverapp.jupyterhub_gpu = load(serverapp)
