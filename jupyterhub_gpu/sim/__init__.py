"""Trace-driven culling simulator: replays lab workload traces through the service's real cull rules.

- :mod:`.trace` generates synthetic traces (``python -m jupyterhub_gpu.sim.trace``);
- :mod:`.replay` reads a trace and replays it under a policy with a simulated clock;
- ``python -m jupyterhub_gpu.sim`` prints the JSON report (see docs/culling.md).
"""
