"""Through a real hub, in a real browser: flag a running cell "stop when done"; the cell ends, the server stops."""

from __future__ import annotations

import re
import time
from datetime import timezone

import nbformat
import pytest

from jupyterhub_gpu.ledger.store import Ledger
from tests.browser.conftest import shot
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = [pytest.mark.browser, pytest.mark.hub]

EXTRA = """
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
c.Spawner.args = c.Spawner.args + [
    "--GPUStats.push_interval=2",
    "--GPUStats.interval=1",
    "--GPUStopWhenDone.settle_seconds=3",
    "--GPUStopWhenDone.save_grace_seconds=20",
]
c.Spawner.default_url = "/lab"
"""


def service_port(config: str) -> int:
    return int(config.split('"url": "http://127.0.0.1:')[1].split('"')[0])


def test_flagged_run_finishes_then_the_server_saves_and_stops(make_hub, tmp_path, page):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("stu1")
    notebook = tmp_path / "homes/stu1/work/long.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("import time\ntime.sleep(20)\nprint('training done')")]
    notebook.parent.mkdir(parents=True)
    nbformat.write(nb, notebook)
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    hub.start_server("stu1", {"profile": "t4"})
    hub.wait_ready("stu1")

    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", "stu1")
    page.fill("input[name=password]", "pw")
    page.click("#login_submit")
    page.goto(f"{hub.url}/user/stu1/lab/tree/work/long.ipynb")
    page.add_style_tag(content="#react-toastify-container { display: none !important; }")
    editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
    editor.wait_for(timeout=90_000)
    page.locator(".jp-Notebook-ExecutionIndicator[data-status=idle]").wait_for(timeout=60_000)
    page.get_by_text(re.compile(r"Python 3 \(ipykernel\) \| Idle")).wait_for(timeout=60_000)

    # run the cell, then flag it from the command palette while it runs
    running = page.locator(".jp-Notebook .jp-InputPrompt", has_text="[*]").first
    for _attempt in range(3):  # a run sent while the kernel's connection settles can be dropped: send it again
        editor.click()
        page.keyboard.press("Shift+Enter")
        try:
            running.wait_for(timeout=10_000)
            break
        except Exception:
            continue
    running.wait_for(timeout=5_000)
    page.keyboard.press("Control+Shift+C")
    palette = page.locator(".lm-CommandPalette-input")
    palette.fill("Stop this server when")
    page.locator(".lm-CommandPalette-item", has_text="Stop this server when the running cells finish").first.click()
    flagged = page.locator(".jp-gpu-StopWhenDone-compact .jp-gpu-StopWhenDone-status")
    wait_for(lambda: flagged.inner_text() == "Stops when the running cells finish", 15, what="the flag shown")
    shot(page, "stop-when-done")
    assert hub.server("stu1")["ready"]  # still running: the cell has not finished

    # the cell finishes; the Lab saves the notebook (with its output) and the server stops
    hub.wait_stopped("stu1", timeout=90)
    stopped_seen = time.time()
    saved = nbformat.read(notebook, as_version=4)
    assert "training done" in str(saved.cells[0].outputs), saved.cells[0].outputs
    (record,) = ledger.sessions(user="stu1")
    assert record.stop_reason == "stop_when_done"
    assert abs(record.stopped.replace(tzinfo=timezone.utc).timestamp() - stopped_seen) < 10
    assert record.minutes in (1, 2)  # billing ended at the stop
    notice = wait_for(lambda: [n for n in ledger.notices("stu1") if n.kind == "run"], 30, what="the run notice")
    assert re.search(r"stopped when its running cells finished: \d minutes? billed, CN¥0\.\d\d", notice[0].message)
