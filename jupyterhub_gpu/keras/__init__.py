"""Keras callbacks for training on a per-minute-billed GPU server that can be stopped at any time.

    from jupyterhub_gpu.keras import BudgetGuard, CheckpointAndResume, PlateauStop

    checkpoint = CheckpointAndResume("~/work/checkpoints/my-model")
    model.fit(x, y, epochs=50, callbacks=[checkpoint, PlateauStop(), BudgetGuard()])

- :class:`CheckpointAndResume` saves a checkpoint (weights, optimizer, epoch) at every epoch end
  and when the server is being stopped (the interrupt and SIGTERM a cull, a budget stop, an admin
  or a preempted node send), keeps the last ``keep``, and on the next ``fit`` restores the latest
  and starts at the epoch after it.
- :class:`PlateauStop` stops when the monitored loss has stayed within ``min_delta`` for
  ``patience`` evaluations, after saving a checkpoint.
- :class:`BudgetGuard` reads the remaining budget from this server's ``/gpu/api/v1/stats`` and
  saves and stops before it runs out.

TensorFlow is imported only when one of the callbacks is first used, so the hub side never
needs it. The decisions themselves (:mod:`.plateau`, :mod:`.budget`) are plain Python.
"""

from __future__ import annotations

__all__ = ["BudgetGuard", "CheckpointAndResume", "PlateauStop"]


def __getattr__(name: str):
    if name in __all__:
        from jupyterhub_gpu.keras import callbacks  # optional heavy dependency: TensorFlow, on first use

        return getattr(callbacks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
