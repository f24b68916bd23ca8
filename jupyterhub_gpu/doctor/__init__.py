"""``jupyterhub-gpu doctor``: the checks an admin runs before opening the hub to students.

It reads ``jupyterhub_config.py`` as ``jupyterhub -f`` does and the gpu service's settings as the
service does (its command line in ``c.JupyterHub.services``, then its config file), and checks each
thing a first hour goes wrong on, one line each with pass / warn / fail and the fix:

- :mod:`.options`: the subcommand's arguments (light: ``jupyterhub-gpu`` imports it for every command);
- :mod:`.loading`: the two configurations, loaded the way the hub and the service load them;
- :mod:`.checks`: one function per check over the loaded setup, returning :class:`.results.Result` lines,
  and the list of them all; the GPU inventory's in :mod:`.gpus` (a static one against the host's NVML),
  Docker's in :mod:`.dockerchecks`, the ports' in :mod:`.ports`, Kueue mode's (its queues, quotas and
  priority classes in the cluster) in :mod:`.kueue`;
- :mod:`.docker`: what the Docker checks ask the engine (read-only but the probe containers);
- :mod:`.probes`: the probe containers that try a property (servers isolated, the image reads a GPU);
- :mod:`.databases`: the ledger's file or server and its migration, read only;
- :mod:`.channels`: where each configured alert channel connects, and the ``--send-test`` message;
- :mod:`.report`: the text and JSON output and the exit status;
- :mod:`.runner`: the subcommand itself (the heavy part, imported only when ``doctor`` runs).
- :mod:`.renaming`: ``jupyterhub-gpu hub-rename``, a hub's rows on the ledger moved to its new name (its
  arguments in :mod:`.options`; the ledger's part is :mod:`jupyterhub_gpu.ledger.renaming`).
"""
