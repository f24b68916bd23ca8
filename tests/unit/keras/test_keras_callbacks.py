"""The Keras callbacks in real (tiny) TensorFlow training runs: checkpoint, resume, signals, plateau, budget."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from jupyterhub_gpu.keras.budget import BudgetView, budget_view, read_stats, stop_reason
from jupyterhub_gpu.keras.plateau import PlateauTracker, request_server_stop, stop_server_url

tf = pytest.importorskip("tensorflow")
# TensorFlow's absl makes a log handler bound to the stderr of the moment (pytest's capture file). Any later
# logging.config.dictConfig (every traitlets Application's initialize does one) closes every live handler,
# and absl's close() closes its stream unless it is the real stderr: so give it the real stderr.
try:
    import absl.logging

    absl.logging.get_absl_handler().python_handler.stream = sys.__stderr__
except ImportError:  # pragma: no cover - TensorFlow always brings absl
    pass

from jupyterhub_gpu.keras import BudgetGuard, CheckpointAndResume, PlateauStop  # noqa: E402
from jupyterhub_gpu.keras.callbacks import weights_sha256  # noqa: E402

X = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
Y = (X.sum(axis=1, keepdims=True) > 0).astype("float32")
BATCHES = 8  # 64 samples, batch 8


def make_model(seed=0):
    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(8), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")
    return model


class Recorder(tf.keras.callbacks.Callback):
    """Records the epochs run and the weights when training began; can act at a given batch."""

    def __init__(self, at=None, action=None):
        super().__init__()
        self.epochs, self.at, self.action = [], at, action
        self.begin_sha = None

    def on_train_begin(self, logs=None):
        self.begin_sha = weights_sha256(self.model)

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.at == (self.epoch, batch):
            self.action()


def fit(model, callbacks, epochs):
    return model.fit(X, Y, batch_size=8, epochs=epochs, verbose=0, shuffle=False, callbacks=callbacks)


def test_tensorflow_is_imported_only_when_a_callback_is_used():
    code = (
        "import sys, jupyterhub_gpu.keras, jupyterhub_gpu.keras.budget, jupyterhub_gpu.keras.plateau;"
        "assert 'tensorflow' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_every_epoch_is_saved_the_last_k_kept_and_the_next_fit_resumes_exactly(tmp_path):
    first = make_model(0)
    ckpt = CheckpointAndResume(tmp_path / "run", keep=2, verify=True, verbose=0)
    fit(first, [ckpt], epochs=3)
    progress = ckpt.progress()
    assert progress["epoch"] == 3 and progress["reason"] == "epoch" and progress["batch"] is None
    assert progress["weights_sha256"] == weights_sha256(first)
    kept = sorted(p.name for p in (tmp_path / "run").glob("ckpt-*.index"))
    assert kept == ["ckpt-2.index", "ckpt-3.index"]
    iterations = int(first.optimizer.iterations.numpy())
    assert iterations == 3 * BATCHES

    # a new process would build a fresh model (other initial weights): it resumes at epoch 3
    second = make_model(1)
    assert weights_sha256(second) != progress["weights_sha256"]
    seen = Recorder()
    ckpt2 = CheckpointAndResume(tmp_path / "run", keep=2, verify=True, verbose=0)
    history = fit(second, [ckpt2, seen], epochs=5)
    assert ckpt2.initial_epoch == 3
    assert seen.epochs == [3, 4] and len(history.history["loss"]) == 2
    assert seen.begin_sha == progress["weights_sha256"]  # exactly the saved weights
    assert int(second.optimizer.iterations.numpy()) == 5 * BATCHES  # the optimizer's state came back too
    assert ckpt2.progress()["epoch"] == 5
    assert sorted(p.name for p in (tmp_path / "run").glob("ckpt-*.index")) == ["ckpt-4.index", "ckpt-5.index"]

    # resume() before fit gives the epoch for initial_epoch= and the same weights
    third = make_model(2)
    ckpt3 = CheckpointAndResume(tmp_path / "run", verbose=0)
    assert ckpt3.resume(third) == 5 and weights_sha256(third) == ckpt2.progress().get("weights_sha256")


def test_sigterm_mid_epoch_saves_at_the_batch_end_then_ends_as_sigterm_would(tmp_path):
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        model = make_model(0)
        ckpt = CheckpointAndResume(tmp_path / "run", verify=True, verbose=0)
        stopper = Recorder(at=(1, 3), action=lambda: os.kill(os.getpid(), signal.SIGTERM))
        history = fit(model, [stopper, ckpt], epochs=10)
        assert received == [signal.SIGTERM]  # handed on to the handler that was there before
        assert signal.getsignal(signal.SIGTERM) is not ckpt._on_signal
    finally:
        signal.signal(signal.SIGTERM, previous)
    progress = ckpt.progress()
    # the signal came after the 4th batch of epoch 2: saved right there, no further step taken
    assert progress["reason"] == "SIGTERM" and progress["epoch"] == 1 and progress["batch"] == 4
    assert stopper.epochs == [0, 1] and len(history.history["loss"]) == 2
    assert int(model.optimizer.iterations.numpy()) == BATCHES + 4

    resumed, seen = make_model(3), Recorder()
    fit(resumed, [CheckpointAndResume(tmp_path / "run", verify=True, verbose=0), seen], epochs=3)
    assert seen.epochs == [1, 2]  # the cut epoch starts again...
    assert seen.begin_sha == progress["weights_sha256"]  # ...from the weights saved at the signal


def test_an_interrupt_saves_and_still_interrupts(tmp_path):
    model = make_model(0)
    ckpt = CheckpointAndResume(tmp_path / "run", verbose=0)
    stopper = Recorder(at=(0, 2), action=lambda: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):
        fit(model, [stopper, ckpt], epochs=5)
    assert ckpt.progress()["reason"] == "SIGINT" and ckpt.progress()["batch"] == 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_interrupt_during_the_batch_aborts_at_once(tmp_path):
    def twice():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)

    ckpt = CheckpointAndResume(tmp_path / "run", verbose=0)
    with pytest.raises(KeyboardInterrupt):
        fit(make_model(0), [Recorder(at=(1, 2), action=twice), ckpt], epochs=5)
    assert ckpt.progress()["reason"] == "epoch" and ckpt.progress()["epoch"] == 1  # nothing saved on the abort
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_after_a_fit_that_failed_an_interrupt_is_an_interrupt_again(tmp_path):
    def fail():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        fit(make_model(0), [CheckpointAndResume(tmp_path / "run", verbose=0), Recorder(at=(0, 1), action=fail)], 3)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize(
    ("values", "stops_at"),
    [
        ([1.0, 0.5, 0.3, 0.3005, 0.2998, 0.3, 0.3009, 0.3, 0.3], 7),  # anchor 0.3, then 5 flat
        ([0.9, 0.9, 0.9, 0.9, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95], 9),  # a jump restarts the count
        ([0.5, 0.4995, float("nan"), 0.4995, 0.4995, 0.4995, 0.4995, 0.4995, 0.4995], 8),  # NaN: never flat
    ],
)
def test_plateau_rule_on_crafted_sequences(values, stops_at):
    tracker = PlateauTracker(patience=5, min_delta=1e-3)
    flags = [tracker.update(v) for v in values]
    assert flags.index(True) == stops_at


def test_plateau_stop_ends_a_real_fit_after_exactly_n_flat_evaluations(tmp_path):
    losses = [1.0, 0.6, 0.42, 0.4201, 0.4199, 0.42, 0.4205, 0.4202, 0.1, 0.1]

    class Crafted(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["val_loss"] = losses[epoch]  # the dict the next callbacks see

    model = make_model(0)
    ckpt = CheckpointAndResume(tmp_path / "run", verbose=0)
    plateau = PlateauStop(patience=5, min_delta=1e-3, verbose=0)
    history = fit(model, [Crafted(), plateau, ckpt], epochs=len(losses))
    assert len(history.history["loss"]) == 8  # anchor at epoch 3, five flat ones: epochs 4-8
    assert plateau.stopped_epoch == 8
    assert plateau.message.startswith("PlateauStop: val_loss stayed within 0.001 of 0.42 for 5 evaluations")
    assert "saved" in plateau.message and plateau.message.endswith("stopped training")
    assert ckpt.progress()["reason"] == "plateau" and ckpt.progress()["epoch"] == 8
    assert len(list((tmp_path / "run").glob("ckpt-*.index"))) == 3  # one per epoch, not two for epoch 8


class StopRecorder(http.server.BaseHTTPRequestHandler):
    """A server's ``stop-when-done/now``: records each request and whether the checkpoint existed by then."""

    seen: list = []
    directory = None
    status = 200

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        progress = self.directory / "progress.json"
        saved = json.loads(progress.read_text())["reason"] if progress.exists() else None
        self.seen.append((self.path, self.headers.get("Authorization"), body, saved))
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(json.dumps({"state": "saving", "reason": body["reason"]}).encode())

    def log_message(self, *args):
        pass


def plateau_fit(tmp_path, **kwargs):
    """A fit that plateaus at epoch 7 (anchor 0.3 at epoch 2, five flat ones) with a PlateauStop(**kwargs)."""
    losses = [1.0, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]

    class Crafted(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["val_loss"] = losses[epoch]

    ckpt = CheckpointAndResume(tmp_path / "run", verbose=0)
    plateau = PlateauStop(**{"patience": 5, "verbose": 0, **kwargs})
    history = fit(make_model(0), [Crafted(), plateau, ckpt], epochs=len(losses))
    return plateau, ckpt, len(history.history["loss"])


def test_plateau_stop_server_saves_then_asks_its_own_server_to_stop_with_its_token(tmp_path, monkeypatch):
    StopRecorder.seen, StopRecorder.directory, StopRecorder.status = [], tmp_path / "run", 200
    server = http.server.HTTPServer(("127.0.0.1", 0), StopRecorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("JUPYTERHUB_SERVICE_URL", f"http://127.0.0.1:{server.server_port}/user/alice/")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "server-token")
    try:
        plateau, ckpt, epochs = plateau_fit(tmp_path, stop_server=True)
        assert epochs == 7 and ckpt.progress()["reason"] == "plateau"
        # one request, to this server's endpoint, with the server's token, after the checkpoint was written
        assert StopRecorder.seen == [
            ("/user/alice/gpu/api/v1/stop-when-done/now", "token server-token", {"reason": "plateau"}, "plateau")
        ]
        assert plateau.server_stop == "the server saves the open notebooks and stops (its GPU is released)"
        assert plateau.message.endswith("stopped training; stopping the server: " + plateau.server_stop)

        # the server refuses: training has stopped all the same, and the words say the billing goes on
        StopRecorder.seen, StopRecorder.status = [], 409
        plateau, ckpt, epochs = plateau_fit(tmp_path / "again", stop_server=True)
        assert epochs == 7 and len(StopRecorder.seen) == 1
        assert "did not take the stop (HTTPError: HTTP Error 409" in plateau.server_stop
        assert "stop the server from the hub's home page" in plateau.server_stop
    finally:
        server.shutdown()


def test_plateau_stop_server_outside_a_hub_only_stops_training(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("JUPYTERHUB_SERVICE_URL", raising=False)
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN", raising=False)
    plateau, ckpt, epochs = plateau_fit(tmp_path, stop_server=True, verbose=1)
    assert epochs == 7 and ckpt.progress()["reason"] == "plateau"
    assert (
        plateau.server_stop.startswith("not in a JupyterHub server") and "only training stopped" in plateau.server_stop
    )
    assert "PlateauStop: stopping the server: not in a JupyterHub server" in capsys.readouterr().out
    # without stop_server nothing is asked of the server; a callable does the stop itself
    plateau, _ckpt, _ = plateau_fit(tmp_path / "off")
    assert plateau.server_stop is None and "stopping the server" not in plateau.message
    asked = []
    plateau, _ckpt, _ = plateau_fit(tmp_path / "own", stop_server=lambda reason: asked.append(reason) or "done")
    assert asked == ["plateau"] and plateau.message.endswith("; stopping the server: done")


def test_stop_server_url_needs_the_servers_url_and_token():
    assert stop_server_url({}) is None
    assert stop_server_url({"JUPYTERHUB_SERVICE_URL": "http://x/user/a/"}) is None
    env = {"JUPYTERHUB_SERVICE_URL": "http://x/user/a/", "JUPYTERHUB_API_TOKEN": "t"}
    assert stop_server_url(env) == "http://x/user/a/gpu/api/v1/stop-when-done/now"
    # nothing listens there: the words say so, nothing raises
    env = {"JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:9/user/a/", "JUPYTERHUB_API_TOKEN": "t"}
    assert "did not take the stop" in request_server_stop("plateau", env, timeout=2)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_budget_guard_saves_and_stops_before_a_budget_that_runs_out_mid_training(tmp_path):
    clock = FakeClock()
    budget_minutes = 10.0  # at this server's rate

    def stats():
        left = budget_minutes - clock.now / 60
        return {"session": {"budget_minutes_left": int(left), "budget_remaining": f"{left * 0.05:.2f}",
                            "budget_unit": "money", "currency_symbol": "¥"}, "notices": []}  # fmt: skip

    class ThreeMinuteEpochs(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            clock.now += 180

    model = make_model(0)
    ckpt = CheckpointAndResume(tmp_path / "run", verbose=0)
    guard = BudgetGuard(margin_minutes=2, stats=stats, clock=clock, verbose=0)
    history = fit(model, [ThreeMinuteEpochs(), ckpt, guard], epochs=10)
    # after epoch 2, 4 minutes are left and the next epoch takes 3: stop with 4 minutes to spare
    assert len(history.history["loss"]) == 2
    assert guard.last_view.minutes_left == 4 and guard.last_view.minutes_left > 0
    assert "the next epoch (about 3.0 min) would end inside the 2 min margin" in guard.message
    assert ckpt.progress()["reason"] == "budget" and ckpt.progress()["epoch"] == 2


def test_budget_guard_stops_on_the_final_notice_and_ignores_no_budget_or_unreadable_stats(tmp_path, capsys):
    final = {
        "session": {"budget_minutes_left": 0, "budget_remaining": "0.00", "budget_unit": "money"},
        "notices": [{"kind": "budget", "level": "error", "message": "Budget used up: stopping in 5 minutes"}],
    }
    model = make_model(0)
    guard = BudgetGuard(stats=lambda: final, verbose=0)
    history = fit(model, [CheckpointAndResume(tmp_path / "a", verbose=0), guard], epochs=5)
    assert len(history.history["loss"]) <= 1 and "Budget used up" in guard.message

    def broken():
        raise OSError("connection refused")

    for source in (lambda: {"session": None, "notices": []}, broken):
        guard = BudgetGuard(stats=source, check_every_seconds=0)
        history = fit(make_model(0), [guard], epochs=3)
        assert len(history.history["loss"]) == 3 and guard.message is None
    assert capsys.readouterr().out.count("cannot read this server's budget") == 1  # said once, not per batch


def test_budget_rules_and_reading_the_servers_stats_with_its_token():
    view = BudgetView(minutes_left=30, remaining="1.50", unit="money", currency_symbol="¥", final_notice=None)
    assert view.describe() == "¥1.50 left, about 30 min at this server's rate"
    assert stop_reason(view, 2) is None and stop_reason(view, 2, next_epoch_minutes=27.5) is None
    assert "next epoch" in stop_reason(view, 2, next_epoch_minutes=28)
    assert "only about 2 min" in stop_reason(BudgetView(2, "0.1", "money", "¥", None), 2)
    assert budget_view({"session": None}).describe() == "no budget applies to this server"

    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            body = json.dumps(
                {"session": {"budget_minutes_left": 7, "budget_remaining": "3", "budget_unit": "gpu_hours"}}
            )
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env_url = f"http://127.0.0.1:{server.server_port}/user/alice/"
        url = env_url + "gpu/api/v1/stats?history=0"
        stats = read_stats(url, token="server-token")
        assert budget_view(stats).describe() == "3 GPU-hours left, about 7 min at this server's rate"
        assert seen == [("/user/alice/gpu/api/v1/stats?history=0", "token server-token")]
    finally:
        server.shutdown()
    with pytest.raises(ValueError, match="JUPYTERHUB_SERVICE_URL"):
        read_stats(token="x") if "JUPYTERHUB_SERVICE_URL" not in os.environ else read_stats("", token="x")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: CheckpointAndResume("/tmp/x", keep=0), "keep must be"),
        (lambda: CheckpointAndResume("/tmp/x", signals=("SIGNOPE",)), "unknown signal"),
        (lambda: PlateauStop(patience=0), "patience must be"),
        (lambda: PlateauStop(min_delta=-0.1), "min_delta must be"),
        (lambda: PlateauStop(stop_server="yes"), "stop_server must be"),
        (lambda: BudgetGuard(margin_minutes=-1), "margin_minutes must be"),
        (lambda: BudgetGuard(check_every_seconds="often"), "check_every_seconds must be"),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_message(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_each_server_of_a_user_checkpoints_in_its_own_directory_unless_told(tmp_path, monkeypatch):
    """All of a user's servers share ~/work: two notebook jobs of one sweep, run at once on servers job-<id>,
    must not resume from (and prune) each other's checkpoints; a job put back keeps its server, and its own."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("JUPYTERHUB_SERVER_NAME", raising=False)
    checkpoints = tmp_path / "work" / "checkpoints"
    assert CheckpointAndResume().directory == checkpoints / "default"
    jobs = []
    for name in ("job-7f3a", "job-9c1e"):
        monkeypatch.setenv("JUPYTERHUB_SERVER_NAME", name)
        jobs.append(CheckpointAndResume(verbose=0))
    assert [j.directory for j in jobs] == [checkpoints / "server-job-7f3a", checkpoints / "server-job-9c1e"]
    model = make_model()
    model.fit(X, Y, batch_size=8, epochs=2, verbose=0, callbacks=[jobs[0]])
    assert jobs[1].resume(make_model(1)) == 0  # the other job starts from scratch, not from the first's epochs
    # a server named "default", or names that differ only in characters a file name cannot keep: apart too
    seen = {checkpoints / "default"}
    for name in ("default", "a b", "a_b", "a/b", "..", "exp/../../x"):
        monkeypatch.setenv("JUPYTERHUB_SERVER_NAME", name)
        directory = CheckpointAndResume().directory
        assert directory.parent == checkpoints and directory not in seen, name
        seen.add(directory)
    assert CheckpointAndResume(tmp_path / "mine").directory == tmp_path / "mine"  # a directory given wins
