"""What a stopped session keeps of its work: the checkpoints ``CheckpointAndResume`` saves, in trace minutes.

The Keras callback (:class:`jupyterhub_gpu.keras.callbacks.CheckpointAndResume`, docs/images.md) saves at the end
of every epoch, and when the server is stopped (the kernels are interrupted) at the end of the running batch;
the next ``fit`` resumes from the latest save. A stopped server's kernel is killed
:data:`STOP_SAVE_SECONDS` after the interrupt, so a batch and save that take longer are cut off, and the last
epoch's checkpoint stays the latest.

In a trace, a ``fit`` is a run of GPU-busy minutes: its epochs end every ``epoch_minutes`` busy minutes from
the run's first, and the run's last minute ends its last epoch (a fit ends at an epoch's end). A job without
the callback keeps nothing: it starts again from its first minute.
"""

from __future__ import annotations

from typing import Protocol

from jupyterhub_gpu.sim.replay import TraceMinute

#: Seconds between a stopped server's interrupt and the kill of its kernels: the image's
#: ``KernelManager.shutdown_wait_time`` (docs/images.md); a save at the stop must finish within them.
STOP_SAVE_SECONDS = 8


class Saving(Protocol):
    """What of a job (:class:`.pool.Job`) says how it saves."""

    minutes: tuple[TraceMinute, ...]
    checkpoints: bool
    epoch_minutes: int | None
    saves_on_stop: bool


def epoch_ends(minutes: tuple[TraceMinute, ...], epoch_minutes: int | None, stop: int) -> list[int]:
    """The trace indexes before ``stop`` at which an epoch's save is complete (the index after its last minute)."""
    ends = []
    run = 0
    for i in range(min(stop, len(minutes))):
        if not minutes[i].gpu_busy:
            run = 0
            continue
        run += 1
        fit_ends = i + 1 == len(minutes) or not minutes[i + 1].gpu_busy
        if fit_ends or (epoch_minutes and run % epoch_minutes == 0):
            ends.append(i + 1)
    return ends


def resume_point(job: Saving, offset: int, stop: int) -> int:
    """The trace index a job stopped at ``stop`` resumes from, its session having started at ``offset``.

    ``stop`` when it saved at the stop; else its last epoch's save since ``offset`` (``offset`` itself, where
    that session started from a checkpoint, when none); 0 without ``CheckpointAndResume``.
    """
    if not job.checkpoints:
        return 0
    if job.saves_on_stop:
        return stop
    ends = [i for i in epoch_ends(job.minutes, job.epoch_minutes, stop) if i > offset]
    return ends[-1] if ends else offset
