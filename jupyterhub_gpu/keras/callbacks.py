"""The Keras callbacks (imports TensorFlow; :mod:`jupyterhub_gpu.keras` loads this lazily)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time
import weakref
from datetime import datetime, timezone
from pathlib import Path

import tensorflow as tf

from jupyterhub_gpu.env import server_file_name
from jupyterhub_gpu.keras.budget import budget_view, read_stats, stop_reason
from jupyterhub_gpu.keras.plateau import PlateauTracker, request_server_stop

#: the CheckpointAndResume of each model, so PlateauStop and BudgetGuard save through it
_CHECKPOINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

DEFAULT_DIRECTORY = "~/work/checkpoints/default"


def default_directory() -> str:
    """Where checkpoints go unless told: ``~/work/checkpoints/default`` on the default server, and
    ``~/work/checkpoints/server-<name>`` on a named one (:func:`~jupyterhub_gpu.env.server_file_name`). All of
    a user's servers share ``~/work``: two notebook jobs (servers ``job-<id>``) of one sweep would otherwise
    resume from, and prune, each other's checkpoints. A server started again (a preempted job put back, a
    restart on a bigger profile) keeps its name, and so its checkpoints."""
    name = os.environ.get("JUPYTERHUB_SERVER_NAME", "")
    return f"~/work/checkpoints/server-{server_file_name(name)}" if name else DEFAULT_DIRECTORY


PROGRESS_FILE = "progress.json"


def weights_sha256(model) -> str:
    """A digest of every weight of ``model`` (order, dtype, shape and bytes)."""
    digest = hashlib.sha256()
    for w in model.get_weights():
        digest.update(f"{w.dtype.str}{w.shape}".encode())
        digest.update(w.tobytes())
    return digest.hexdigest()


def _in_fit(frame) -> bool:
    """Whether Keras's ``fit`` is on the stack of ``frame`` (the frame a signal interrupted)."""
    while frame is not None:
        if frame.f_code.co_name == "fit" and "keras" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _say(callback, message: str) -> None:
    if callback.verbose:
        print(message, flush=True)


class _ResumeAt:
    """What Keras's ``fit`` asks, after ``on_train_begin``, for the epoch to start at."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch, initial_epoch, mode=None):
        return max(int(initial_epoch), self.epoch), 0


class CheckpointAndResume(tf.keras.callbacks.Callback):
    """Checkpoint every epoch and when the server is stopped; resume from the latest on the next fit.

    A checkpoint holds the weights, the optimizer's state and the number of finished epochs
    (a ``tf.train.Checkpoint``); ``progress.json`` next to it says which is the latest and why it
    was saved. The last ``keep`` checkpoints are kept.

    Stopping the server interrupts its kernels (SIGINT) and then sends SIGTERM; a script run in a
    terminal gets SIGTERM or SIGHUP. On the first of ``signals`` the callback asks Keras to stop,
    saves at the end of the current batch, and then lets the signal do what it would have done
    (an interrupt raises ``KeyboardInterrupt``, SIGTERM ends the process), so the stop keeps its
    meaning and nothing is lost. A second interrupt while a batch runs aborts at once.

    The next ``fit`` with this callback restores the latest checkpoint and starts at the epoch
    after the last finished one (a stop in the middle of an epoch keeps the weights of its last
    finished batch and starts that epoch again from them). ``resume(model)`` does the same
    before ``fit`` and returns that epoch, for ``initial_epoch=`` or for code that must know.
    """

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        keep: int = 3,
        save_optimizer: bool = True,
        signals: tuple[str, ...] = ("SIGINT", "SIGTERM", "SIGHUP"),
        verify: bool = False,
        verbose: int = 1,
    ):
        super().__init__()
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a whole number of checkpoints >= 1, got {keep!r}")
        self.signals = tuple(signals)
        for name in self.signals:
            if not isinstance(name, str) or not hasattr(signal, name) or not name.startswith("SIG"):
                raise ValueError(f"unknown signal {name!r}: use names such as 'SIGTERM'")
        self.directory = Path(os.path.expanduser(os.fspath(default_directory() if directory is None else directory)))
        self.keep = keep
        self.save_optimizer = save_optimizer
        self.verify = verify
        self.verbose = verbose
        self.initial_epoch = 0  # the epoch the last restore resumed at
        self.last_saved: dict | None = None
        self.stop_signal: str | None = None
        self._checkpoint = None
        self._manager = None
        self._epoch_var = None
        self._restored_for = None  # the model the latest checkpoint was restored into
        self._previous_handlers: dict[int, object] = {}
        self._saved_at: tuple[int, int | None] | None = None
        self._epoch = 0
        self._saved_on_signal = self._cut_short = False

    # -- storage -------------------------------------------------------------------------------
    def _objects(self, model):
        if self._checkpoint is None or self._checkpoint_model is not model:
            self._epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="jupyterhub_gpu_epoch")
            tracked = {"model": model, "epoch": self._epoch_var}
            if self.save_optimizer and getattr(model, "optimizer", None) is not None:
                tracked["optimizer"] = model.optimizer
            self._checkpoint = tf.train.Checkpoint(**tracked)
            self._manager = tf.train.CheckpointManager(
                self._checkpoint, str(self.directory), max_to_keep=self.keep, checkpoint_name="ckpt"
            )
            self._checkpoint_model = model
        return self._checkpoint, self._manager

    _checkpoint_model = None

    def progress(self) -> dict | None:
        """The contents of ``progress.json``: the latest checkpoint, its epoch and why it was saved."""
        try:
            return json.loads((self.directory / PROGRESS_FILE).read_text())
        except (OSError, ValueError):
            return None

    def resume(self, model) -> int:
        """Restore the latest checkpoint into ``model`` (and its optimizer); the epoch to start at."""
        checkpoint, manager = self._objects(model)
        self._restored_for = model
        latest = manager.latest_checkpoint
        if latest is None:
            self.initial_epoch = 0
            return 0
        optimizer = getattr(model, "optimizer", None)
        if self.save_optimizer and optimizer is not None and model.built and hasattr(optimizer, "build"):
            # slot variables must exist to be restored now rather than at the first step
            if not getattr(optimizer, "_built", True):
                optimizer.build(model.trainable_variables)
        checkpoint.restore(latest).expect_partial()
        self.initial_epoch = int(self._epoch_var.numpy())
        progress = self.progress() or {}
        detail = f" (saved on {progress['reason']})" if progress.get("checkpoint") == latest else ""
        _say(self, f"CheckpointAndResume: restored {latest}{detail}; resuming at epoch {self.initial_epoch + 1}")
        if self.verify and model.built:
            expected = progress.get("weights_sha256") if progress.get("checkpoint") == latest else None
            actual = weights_sha256(model)
            if expected and expected != actual:
                raise RuntimeError(f"restored weights do not match {latest}: {actual} != {expected}")
            self.restored_weights_sha256 = actual
        return self.initial_epoch

    restored_weights_sha256: str | None = None

    def save_now(self, reason: str, epochs_done: int | None = None, batch: int | None = None) -> str:
        """Save a checkpoint of the model as it is now; its path.

        ``epochs_done`` is the number of finished epochs (by default: those before the running
        one), ``batch`` the batches finished of the next one when it was cut short.
        """
        if epochs_done is not None:
            self._epoch = epochs_done
        if self._saved_at == (self._epoch, batch) and self.last_saved:
            # this state is saved already (e.g. PlateauStop right after the epoch's save)
            self.last_saved["reason"] = reason
            self._write_progress(self.last_saved)
            return self.last_saved["checkpoint"]
        _checkpoint, manager = self._objects(self.model)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._epoch_var.assign(self._epoch)
        started = time.monotonic()
        path = manager.save()
        record = {
            "checkpoint": path,
            "epoch": self._epoch,
            "batch": batch,
            "reason": reason,
            "saved_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seconds": round(time.monotonic() - started, 3),
        }
        if self.verify:
            record["weights_sha256"] = weights_sha256(self.model)
        self._write_progress(record)
        self.last_saved = record
        self._saved_at = (self._epoch, batch)
        self._cut_short = self._cut_short or batch is not None
        return path

    def _write_progress(self, record: dict) -> None:
        target = self.directory / PROGRESS_FILE
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp, target)

    # -- signals -------------------------------------------------------------------------------
    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            _say(self, "CheckpointAndResume: not in the main thread; saving every epoch only")
            return
        for name in self.signals:
            signum = getattr(signal, name)
            try:
                self._previous_handlers[signum] = signal.signal(signum, self._on_signal)
            except (ValueError, OSError):
                continue

    def _restore_handlers(self) -> None:
        for signum, previous in self._previous_handlers.items():
            try:
                signal.signal(signum, previous)
            except (ValueError, OSError, TypeError):
                pass
        handlers, self._previous_handlers = self._previous_handlers, {}
        return handlers

    def _on_signal(self, signum, frame):
        if not _in_fit(frame):
            # a fit that ended in an exception never called on_train_end: hand the signal back
            self.stop_signal = signal.Signals(signum).name
            self._resignal(self._restore_handlers())
            return
        if self.stop_signal is None:
            self.stop_signal = signal.Signals(signum).name
            if self.model is not None:
                self.model.stop_training = True
        elif signum == signal.SIGINT and self.stop_signal == "SIGINT" and not self._saved_on_signal:
            # a second interrupt while the batch still runs: abort now
            self._restore_handlers()
            raise KeyboardInterrupt

    def _resignal(self, handlers: dict) -> None:
        """Let the stop signal do what it would have done without this callback."""
        signum = getattr(signal, self.stop_signal)
        previous = handlers.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, None)
        elif previous == signal.SIG_DFL:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            os.kill(os.getpid(), signum)

    # -- Keras hooks ---------------------------------------------------------------------------
    def set_model(self, model):
        super().set_model(model)
        _CHECKPOINTS[model] = self

    def on_train_begin(self, logs=None):
        self.stop_signal = None
        self._saved_on_signal = self._cut_short = False
        if self._restored_for is not self.model:
            self.resume(self.model)
        self._restored_for = None  # a later fit restores again
        self._epoch = self.initial_epoch
        if hasattr(self.model, "_training_state"):
            # Keras 2 asks its fault-tolerance hook for the first epoch right after on_train_begin
            self.model._training_state = _ResumeAt(self.initial_epoch)
        self._install_handlers()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.stop_signal and not self._saved_on_signal:
            self._saved_on_signal = True
            path = self.save_now(self.stop_signal, batch=batch + 1)
            _say(
                self,
                f"CheckpointAndResume: {self.stop_signal} during epoch {self._epoch + 1}: saved {path}"
                f" after batch {batch + 1}; stopping",
            )

    def on_epoch_end(self, epoch, logs=None):
        if self._cut_short or self._saved_at == (epoch + 1, None):
            return  # cut short and saved at the signal, or saved already (PlateauStop, BudgetGuard)
        self.save_now(self.stop_signal or "epoch", epochs_done=epoch + 1)

    def on_train_end(self, logs=None):
        handlers = self._restore_handlers()
        if hasattr(self.model, "_training_state") and isinstance(self.model._training_state, _ResumeAt):
            self.model._training_state = None
        if self.stop_signal:
            if not self._saved_on_signal and self.last_saved is None:
                self.save_now(self.stop_signal)
            self._resignal(handlers)


def _checkpoint_of(callback) -> CheckpointAndResume | None:
    return callback.checkpoint or _CHECKPOINTS.get(callback.model)


def _save_and_stop(callback, reason: str, message: str, epochs_done=None, batch=None) -> None:
    """Save through the model's CheckpointAndResume (if any), stop training, and say why."""
    checkpoint = _checkpoint_of(callback)
    if checkpoint is not None:
        path = checkpoint.save_now(reason, epochs_done=epochs_done, batch=batch)
        message += f"; saved {path}"
    else:
        message += "; nothing saved (no CheckpointAndResume in the callbacks)"
    callback.model.stop_training = True
    callback.message = message + "; stopped training"
    _say(callback, callback.message)


class PlateauStop(tf.keras.callbacks.Callback):
    """Stop when ``monitor`` has stayed within ``min_delta`` for ``patience`` evaluations (epochs).

    Saves a checkpoint first (through the :class:`CheckpointAndResume` of the same fit, or the
    one given as ``checkpoint``) and leaves a message in ``.message``. The rule is
    :class:`~jupyterhub_gpu.keras.plateau.PlateauTracker`. When ``monitor`` is missing from an
    epoch's logs (no validation data), ``loss`` is used instead.

    With ``stop_server=True`` it then stops this server too, so its GPU (and its billing) is
    released at once rather than after the idle rule: the server saves the open notebooks and
    asks the hub to stop it, the ledger's stop reason being ``plateau``, and the notice of the
    stop says what the run cost. Outside a JupyterHub server it says so and only stops training.
    ``stop_server`` may also be a callable ``(reason) -> words`` that does the stop.
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        patience: int = 5,
        min_delta: float = 1e-3,
        checkpoint: CheckpointAndResume | None = None,
        stop_server=False,
        verbose: int = 1,
    ):
        super().__init__()
        PlateauTracker(patience, min_delta)  # validates both
        if not isinstance(stop_server, bool) and not callable(stop_server):
            raise ValueError(f"stop_server must be True, False or a callable(reason), got {stop_server!r}")
        self.monitor = monitor
        self.patience = patience
        self.min_delta = min_delta
        self.checkpoint = checkpoint
        self.stop_server = stop_server
        self.verbose = verbose
        self.message: str | None = None
        self.stopped_epoch: int | None = None
        self.server_stop: str | None = None  # what the server said to the stop, in words

    def on_train_begin(self, logs=None):
        self.tracker = PlateauTracker(self.patience, self.min_delta)
        self.message = None
        self.stopped_epoch = None
        self.server_stop = None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        name = self.monitor if self.monitor in logs else "loss"
        if name not in logs:
            return
        if self.tracker.update(logs[name]):
            self.stopped_epoch = epoch + 1
            _save_and_stop(
                self,
                "plateau",
                f"PlateauStop: {name} stayed within {self.min_delta:g} of {self.tracker.anchor:.6g}"
                f" for {self.patience} evaluations (epoch {epoch + 1})",
                epochs_done=epoch + 1,
            )
            if self.stop_server:
                stop = self.stop_server if callable(self.stop_server) else request_server_stop
                self.server_stop = stop("plateau")
                self.message += f"; stopping the server: {self.server_stop}"
                _say(self, f"PlateauStop: stopping the server: {self.server_stop}")


class BudgetGuard(tf.keras.callbacks.Callback):
    """Save and stop before this server's budget runs out.

    Reads the budget from the server extension (``stats``: a callable returning the stats dict,
    by default :func:`~jupyterhub_gpu.keras.budget.read_stats` with the server's own token) when
    training begins, every ``check_every_seconds`` during an epoch and at every epoch end. Stops
    when the budget is used up, when ``margin_minutes`` or fewer are left, or (at an epoch end)
    when the next epoch, as long as the last one, would end inside the margin. A server without
    a budget, or stats that cannot be read, never stops training.
    """

    def __init__(
        self,
        margin_minutes: float = 2,
        check_every_seconds: float = 30,
        stats=None,
        checkpoint: CheckpointAndResume | None = None,
        clock=time.monotonic,
        verbose: int = 1,
    ):
        super().__init__()
        for name, value in (("margin_minutes", margin_minutes), ("check_every_seconds", check_every_seconds)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        self.margin_minutes = margin_minutes
        self.check_every_seconds = check_every_seconds
        self.stats = stats or read_stats
        self.checkpoint = checkpoint
        self.clock = clock
        self.verbose = verbose
        self.message: str | None = None
        self.last_view = None
        self.checks = 0
        self._failed = False

    def _read(self):
        try:
            view = budget_view(self.stats())
        except Exception as e:  # the stats endpoint down must never end a training run
            if not self._failed:
                _say(self, f"BudgetGuard: cannot read this server's budget ({type(e).__name__}: {e}); not guarding")
            self._failed = True
            return None
        self._failed = False
        self.checks += 1
        self.last_view = view
        return view

    def _check(self, next_epoch_minutes=None, epochs_done=None, batch=None) -> None:
        self._last_check = self.clock()
        view = self._read()
        if view is None or self.model.stop_training:
            return
        reason = stop_reason(view, self.margin_minutes, next_epoch_minutes)
        if reason:
            _save_and_stop(self, "budget", f"BudgetGuard: {reason}", epochs_done=epochs_done, batch=batch)

    def on_train_begin(self, logs=None):
        self.message = None
        self._epoch_started = self._last_check = self.clock()
        view = self._read()
        if view is not None:
            _say(self, f"BudgetGuard: {view.describe()}")
            reason = stop_reason(view, self.margin_minutes)
            if reason:
                _save_and_stop(self, "budget", f"BudgetGuard: {reason}")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_started = self.clock()

    def on_train_batch_end(self, batch, logs=None):
        if self.clock() - self._last_check >= self.check_every_seconds:
            self._check(batch=batch + 1)

    def on_epoch_end(self, epoch, logs=None):
        self._check(next_epoch_minutes=(self.clock() - self._epoch_started) / 60, epochs_done=epoch + 1)
