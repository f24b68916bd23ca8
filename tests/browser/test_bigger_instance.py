"""Through a real hub, in a real browser: the GPU-memory notice's "Restart on the bigger profile" button.

A student's T4 session whose (simulated) GPU memory has been above 90% for 12 minutes gets the notice
naming the A100 with the button; the notebook open in the Lab has an unsaved edit. Clicking the button
saves it, restarts the server on the A100 (through the hub's spawn-pending page) and reopens the notebook
in the new Lab, its content kept.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import nbformat
import pytest
from sqlalchemy import text

from jupyterhub_gpu.ledger.queries.samples import Push, record_samples
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.samples import Sample
from tests.browser.conftest import shot
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config, service_port

pytestmark = [pytest.mark.browser, pytest.mark.hub]

EXTRA = """
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
c.Spawner.args = c.Spawner.args + ["--GPUStats.push_interval=2", "--GPUStats.interval=1"]
c.Spawner.default_url = "/lab"
"""


def high_memory(ledger: Ledger, session) -> datetime:
    """12 minutes, up to now, of the session's T4 holding 15.5 of its 16 GiB (what its server would push).

    The session is made 13 minutes old first (the cull rules read no minute before a session's start).
    """
    now = datetime.now(timezone.utc)
    with ledger.engine.begin() as db:
        db.execute(
            text("UPDATE gpu_sessions SET started = :at WHERE id = :id"),
            {"at": (now - timedelta(minutes=13)).replace(tzinfo=None), "id": session.id},
        )
    (uuid,) = json.loads(session.gpus)
    pushes = []
    for m in range(11, -1, -1):
        at = now - timedelta(minutes=m)
        sample = Sample(session.id, at, 15, 40.0, 15_872, 16_384, 1, 1, None, None, ((uuid, 40.0, 15_872),))
        pushes.append(Push("stu1", sample))
    record_samples(ledger, pushes)
    return now.replace(second=0, microsecond=0)


def test_the_memory_notice_restarts_on_the_bigger_profile_and_reopens_the_notebook(make_hub, tmp_path, page):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("stu1")
    notebook = tmp_path / "homes/stu1/work/train.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("batch_size = 256")]
    notebook.parent.mkdir(parents=True)
    nbformat.write(nb, notebook)
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    hub.start_server("stu1", {"profile": "t4"})
    hub.wait_ready("stu1")
    (first,) = ledger.sessions(user="stu1")

    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", "stu1")
    page.fill("input[name=password]", "pw")
    page.click("#login_submit")
    page.goto(f"{hub.url}/user/stu1/lab/tree/work/train.ipynb")
    editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
    editor.wait_for(timeout=90_000)
    # an edit not saved yet: the button saves it before the restart
    editor.click()
    page.keyboard.press("End")
    page.keyboard.type("  # smaller next time")
    page.locator(".jp-Notebook .jp-Cell .cm-content", has_text="# smaller next time").wait_for(timeout=10_000)

    seeded = [high_memory(ledger, first)]

    def noticed():
        # the server's own pushes start each new minute low: a minute begun before the tick saw it is seeded again
        if datetime.now(timezone.utc).replace(second=0, microsecond=0) != seeded[-1]:
            seeded.append(high_memory(ledger, first))
        return [n for n in ledger.notices("stu1") if n.kind.startswith("bigger:") or "memory" in n.message]

    (notice,) = wait_for(noticed, 60, what="the memory notice")
    assert notice.kind == "bigger:a100", (notice.kind, notice.message)
    button = page.get_by_role("button", name="Restart on the bigger profile")
    button.wait_for(timeout=60_000)
    assert notice.session_id == first.id and "a100 (1 × 40 GB GPU memory)" in notice.message
    shot(page, "bigger-instance-notice")
    button.click()

    def restarted():
        return [s for s in ledger.sessions(user="stu1") if s.profile == "a100" and s.stopped is None]

    wait_for(restarted, 120, what="stu1 restarted on the A100")
    assert ledger.get_session(first.id).stopped is not None
    # the new Lab opens (after the hub's spawn-pending page) with the notebook reopened, the edit in it
    reopened = page.locator(".jp-Notebook .jp-Cell .cm-content", has_text="# smaller next time")
    reopened.wait_for(timeout=120_000)
    assert page.url.startswith(f"{hub.url}/user/stu1/lab")
    saved = nbformat.read(notebook, as_version=4)
    assert saved.cells[0].source == "batch_size = 256  # smaller next time"
    # the Lab may show the notebook (its URL, its restored layout) before its own restore is done and the
    # extension takes the list: the list is forgotten once that has run, so that a reload reopens nothing
    page.wait_for_function("window.localStorage.getItem('jupyterhub-gpu:reopen') === null", timeout=30_000)
    assert hub.server("stu1")["ready"]
    shot(page, "bigger-instance-reopened")
    hub.stop_server("stu1")
    hub.wait_stopped("stu1", timeout=60)
