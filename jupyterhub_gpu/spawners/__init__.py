"""Spawners with GPU profiles: the mixin and its Docker, Kubernetes and local-process forms.

Importing this package inside a starting JupyterHub schedules a check of the
GPU configuration (profiles, currency, inventory): a bad profile stops the hub
at startup with a message naming it, instead of failing a student's spawn later
(:mod:`.startup`). It also gives the hub's page templates the reader's language
(:mod:`jupyterhub_gpu.hubpages`), so a config that names the package's template
folder as a path, without calling ``template_paths()``, still renders its pages.
"""

from jupyterhub_gpu.hubpages.namespace import install_page_language
from jupyterhub_gpu.spawners.startup import install_startup_check

install_startup_check()
install_page_language()
