"""The preemptible tier end to end: a real hub, real servers and kernels, the real gpu service.

A student trains a small Keras model with ``CheckpointAndResume`` on the preemptible A100 profile and asks to be
put back in the queue if preempted. A full-price request for the one A100 arrives: the hub's scheduler orders the
stop, the service tells the student at once (a JupyterLab notice, by its ledger row) and stops the server at the
end of the grace with reason ``preempted``; the checkpoint is written on the stop, the bill ends there and the
waiting server starts on that A100. The service puts the preempted server back in the queue; when the A100 frees
it starts again, and the same training resumes at the saved epoch with the saved weights and finishes with the
same number of epochs in total. A preemptible session younger than the minimum runtime is never chosen.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest
import requests

from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config
from tests.service.test_plateau_hub import run_cell, service_port

pytestmark = pytest.mark.hub

GRACE = 8
EPOCHS = 60

EXTRA = """
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
c.GPULocalSpawner.profiles = c.GPULocalSpawner.profiles + [
    {"slug": "a100-pre", "gpu_model": "A100", "gpu_count": 1, "price_per_gpu_hour": "15.00",
     "preemptible": True, "price_factor": "0.4"},
]
c.GPULocalSpawner.preempt_min_runtime = %(min_runtime)d
c.GPULocalSpawner.preempt_grace = %(grace)d
c.GPULocalSpawner.schedule_interval = 1
c.Spawner.args = c.Spawner.args + ["--GPUStats.push_interval=2", "--GPUStats.interval=1"]
"""

# the same cell runs before and after the preemption: it resumes from what the stop saved
TRAINING = """
import json, os, time
import numpy as np
import tensorflow as tf
from jupyterhub_gpu.keras import CheckpointAndResume

rng = np.random.default_rng(0)
x = rng.normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
tf.keras.utils.set_random_seed(1)
model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
checkpoint = CheckpointAndResume(os.path.expanduser("~/work/checkpoints/pre"), verify=True, verbose=0)
ran = []

class Slow(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        ran.append(epoch)
        with open(os.path.expanduser("~/work/epochs.log"), "a") as f:
            print(epoch, file=f)
        time.sleep(0.5)

start = checkpoint.resume(model)
record = {"start": start, "restored": checkpoint.restored_weights_sha256}
try:
    model.fit(x, y, epochs=%(epochs)d, initial_epoch=start, batch_size=16, verbose=0, callbacks=[checkpoint, Slow()])
    record["finished"] = True
finally:
    record["ran"] = len(ran)
    with open(os.path.expanduser("~/work/run-%%d.json" %% start), "w") as f:
        json.dump(record, f)
"""


def kernel_of(hub, user: str) -> tuple[str, str, str]:
    token = hub.api("POST", f"/users/{user}/tokens", json={"note": "t"}).json()["token"]
    base = f"{hub.url}/user/{user}"
    kernel = requests.post(
        f"{base}/api/kernels", headers={"Authorization": f"token {token}"}, json={"name": "python3"}, timeout=30
    ).json()["id"]
    return base, token, kernel


def progress(home: Path) -> dict | None:
    try:
        return json.loads((home / "work/checkpoints/pre/progress.json").read_text())
    except (OSError, ValueError):
        return None


def test_a_full_price_request_preempts_the_training_which_saves_stops_resumes_and_finishes(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    hub = make_hub(config + EXTRA % {"port": service_port(config), "min_runtime": 0, "grace": GRACE})
    hub.create_users("stu1", "thea")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    home = tmp_path / "homes/stu1"
    (home / "work").mkdir(parents=True, exist_ok=True)

    hub.start_server("stu1", {"profile": "a100-pre", "resume": True})
    first = hub.wait_ready("stu1")["state"]["gpu"]
    assert first["tier"] == "preemptible" and first["resume"] is True
    base, token, kernel = kernel_of(hub, "stu1")
    asyncio.run(run_cell(base, token, kernel, TRAINING % {"epochs": EPOCHS}))
    wait_for(lambda: (progress(home) or {}).get("epoch", 0) >= 3, 120, what="three epochs trained")

    # a full-price request for the one A100: the preemptible session is told, then stopped after the grace
    hub.start_server("thea", {"profile": "a100"})
    (order,) = wait_for(lambda: rows.stop_orders(ledger, pending=False), 30, what="the preemption order")
    assert (order.user, order.kind, order.for_user, order.reason_key) == ("stu1", "preempted", "thea", "preempt")
    assert abs((order.stop_at - order.decided_at).total_seconds() - GRACE) < 1
    notice = wait_for(lambda: [n for n in ledger.notices("stu1") if "free its GPU" in n.message], 15, what="notice")
    assert "checkpoint" in notice[0].message, notice[0].message
    thea_waits = hub.progress_events("thea", lambda e: "position 1 of 1" in e.get("message", ""))
    assert thea_waits[-1]["message"].startswith("Waiting for a free Simulated A100 — position 1 of 1")

    # the stop: reason preempted, billed to the stop, the checkpoint saved on it; thea gets that A100
    thea = hub.wait_ready("thea", timeout=90)["state"]["gpu"]
    assert thea["devices"] == first["devices"]
    stopped = wait_for(
        lambda: next((s for s in ledger.sessions(user="stu1") if s.stopped is not None), None), 30, what="stu1's bill"
    )
    assert stopped.stop_reason == "preempted"
    assert abs((stopped.stopped - order.stop_at.replace(tzinfo=None)).total_seconds()) < 10, (stopped, order)
    assert order.stop_at.replace(tzinfo=None) - stopped.started > timedelta(seconds=GRACE)
    assert stopped.minutes == -(-(stopped.stopped - stopped.started) // timedelta(minutes=1))
    saved = wait_for(lambda: progress(home), 10, what="the checkpoint's record")
    finished = len((home / "work/epochs.log").read_text().split())
    assert not (home / "work/run-0.json").exists() or not json.loads((home / "work/run-0.json").read_text()).get(
        "finished"
    )
    # nothing lost: every epoch that finished before the stop is in the checkpoint (saved at its end, or on the
    # interrupt with the batches of the one that was cut short); the log is written just after an epoch's save
    assert finished >= 3 and finished <= saved["epoch"] <= finished + 1, (saved, finished)

    # the service puts stu1 back in the queue; thea is full price: nobody preempts her, stu1 waits
    wait_for(lambda: hub.server("stu1") is not None, 30, what="stu1 put back in the queue")
    queued = wait_for(lambda: [q for q in rows.queue(ledger) if q.user == "stu1"], 30, what="stu1 in the queue")
    assert queued[0].tier == "preemptible" and queued[0].position == 1
    assert len(rows.stop_orders(ledger, pending=False)) == 1
    hub.stop_server("thea")
    hub.wait_stopped("thea")
    second = hub.wait_ready("stu1", timeout=90)["state"]["gpu"]
    assert second["session_id"] != first["session_id"] and second["resume"] is True

    # the same training resumes at the saved epoch with the saved weights and ends with EPOCHS in total
    base, token, kernel = kernel_of(hub, "stu1")
    asyncio.run(run_cell(base, token, kernel, TRAINING % {"epochs": EPOCHS}))
    resumed_file = home / f"work/run-{saved['epoch']}.json"
    resumed = wait_for(
        lambda: json.loads(resumed_file.read_text()) if resumed_file.exists() else None, 180, what="the resumed run"
    )
    assert resumed["start"] == saved["epoch"] > 0
    assert resumed["restored"] == saved["weights_sha256"]
    assert resumed["finished"] and resumed["start"] + resumed["ran"] == EPOCHS
    hub.stop_server("stu1")
    hub.wait_stopped("stu1")


def test_a_preemptible_session_younger_than_the_minimum_runtime_is_never_chosen(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    hub = make_hub(config + EXTRA % {"port": service_port(config), "min_runtime": 3600, "grace": GRACE})
    hub.create_users("stu1", "thea")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    hub.start_server("stu1", {"profile": "a100-pre"})
    hub.wait_ready("stu1")
    hub.start_server("thea", {"profile": "a100"})
    events = hub.progress_events("thea", lambda e: "position 1 of 1" in e.get("message", ""))
    assert "Simulated A100" in events[-1]["message"]
    # several scheduling cycles later: still no order, stu1 runs, thea waits
    wait_for(lambda: [q.user for q in rows.queue(ledger)] == ["thea"], 15, what="thea published as waiting")
    import time

    time.sleep(5)
    assert rows.stop_orders(ledger, pending=False) == []
    assert hub.server("stu1")["ready"] and not hub.server("thea").get("ready")
    hub.stop_server("thea")
    hub.wait_stopped("thea")
