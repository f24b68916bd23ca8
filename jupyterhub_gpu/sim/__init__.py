"""Simulators that run the service's real rules in virtual time.

- culling: :mod:`.trace` generates synthetic traces (``python -m jupyterhub_gpu.sim.trace``); :mod:`.replay`
  reads a trace and replays it under a policy with a simulated clock; ``python -m jupyterhub_gpu.sim`` prints
  the JSON report (see docs/culling.md);
- scheduling: :mod:`.pool` plays a lab's GPU pool (arrivals, the queue, culling, preemption, reservations)
  under a scheduling policy; :mod:`.semester` generates a seeded semester for it
  (``python -m jupyterhub_gpu.sim semester``, see docs/scheduling.md).
"""
