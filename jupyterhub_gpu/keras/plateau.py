"""When is a loss flat: the rule :class:`~jupyterhub_gpu.keras.PlateauStop` applies, without TensorFlow."""

from __future__ import annotations

import math


class PlateauTracker:
    """Counts consecutive evaluations that stay within ``min_delta`` of the value that began the run.

    The first value is the anchor. Each later value within ``min_delta`` of the anchor (either
    way) is one flat evaluation; a value further away (or not a number) becomes the new anchor
    and the count starts again. :meth:`update` returns True at the ``patience``-th flat
    evaluation in a row: ``[0.5, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]`` with patience 5 is flat at the
    7th value (0.3 is the anchor, then five flat evaluations).
    """

    def __init__(self, patience: int = 5, min_delta: float = 1e-3):
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"patience must be a whole number of evaluations >= 1, got {patience!r}")
        if isinstance(min_delta, bool) or not isinstance(min_delta, (int, float)) or not min_delta >= 0:
            raise ValueError(f"min_delta must be a number >= 0, got {min_delta!r}")
        self.patience = patience
        self.min_delta = float(min_delta)
        self.anchor: float | None = None
        self.flat = 0

    def update(self, value: float) -> bool:
        """Take one evaluation; True when it is the ``patience``-th flat one in a row."""
        value = float(value)
        if not math.isfinite(value):
            self.anchor, self.flat = None, 0
            return False
        if self.anchor is None or abs(value - self.anchor) > self.min_delta:
            self.anchor, self.flat = value, 0
            return False
        self.flat += 1
        return self.flat >= self.patience
