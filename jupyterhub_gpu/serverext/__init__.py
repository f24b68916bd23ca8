"""The jupyter_server extension of jupyterhub-gpu: GPU stats and session cost for the Lab extension."""

from jupyterhub_gpu.serverext import language


def _jupyter_server_extension_points():
    return [{"module": "jupyterhub_gpu.serverext"}]


def _link_jupyter_server_extension(serverapp):
    # before any extension loads: JupyterLab reads its default settings when it loads
    language.apply(serverapp.log)


def _load_jupyter_server_extension(serverapp):
    # optional heavy dependency: jupyter_server and tornado, loaded only when jupyter_server loads the extension
    # (the sampler and the Keras callbacks import this package without them)
    from jupyterhub_gpu.serverext.extension import load

    serverapp.jupyterhub_gpu = load(serverapp)
