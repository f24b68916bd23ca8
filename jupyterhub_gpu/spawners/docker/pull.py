"""Image pulls on a Docker host: one pull per image shared by everyone who waits on it, with its progress.

A pull runs in a thread of its own (docker-py streams the engine's pull events; the
spawner's one-thread executor must not be held for minutes) and feeds its events
to :class:`PullProgress` on the hub's event loop. :func:`shared_pull` returns the
pull of an image already under way, or starts one: the hub's start-up pre-pull
(:func:`prepull`) and every spawn that needs the image wait on the same pull.

The pure part (:class:`PullProgress`, :func:`pull_phrase`, :func:`registry_error`)
turns the engine's events into "3 of 7 layers, 412 MB of 1.9 GB" and its errors
into the registry's own words.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from jupyterhub_gpu.spawners.messages import Phrase

#: Layer statuses of ``docker pull`` after which the layer is on the host.
DONE_STATUSES = ("Pull complete", "Already exists")


def in_thread(fn, *args) -> asyncio.Future:
    """Run blocking ``fn(*args)`` in a daemon thread of its own; its result as a future of the running loop.

    A pull holds its thread for its whole length: neither DockerSpawner's one-thread executor nor asyncio's
    default one (the ledger's) may be held by it, and a hub that stops must not wait for a pull to end (an
    executor's threads are joined at exit).
    """
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result, error):
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run():
        try:
            result, error = fn(*args), None
        except BaseException as e:
            result, error = None, e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop closed: the hub is stopping
            pass

    threading.Thread(target=run, name="jupyterhub-gpu-pull", daemon=True).start()
    return future


def split_image(image: str) -> tuple[str, str]:
    """``repo, tag`` of an image name (a registry's port is no tag: ``host:5000/x`` is ``host:5000/x, latest``)."""
    if "@" in image:
        repo, digest = image.split("@", 1)
        return repo, digest
    if ":" in image.rsplit("/", 1)[-1]:
        repo, tag = image.rsplit(":", 1)
        return repo, tag
    return image, "latest"


def format_bytes(n: int) -> str:
    """Bytes as ``docker pull`` shows them, in decimal units: 412 MB, 1.9 GB."""
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n} B"


@dataclass
class _Layer:
    current: int = 0  # bytes downloaded
    total: int | None = None  # the compressed size, once the engine says it
    done: bool = False


@dataclass
class PullProgress:
    """What one pull has done so far, from the engine's stream of pull events (pure)."""

    layers: dict[str, _Layer] = field(default_factory=dict)
    error: str | None = None

    def update(self, event: dict) -> None:
        """Take one event of the pull stream (``{"status": ..., "id": ..., "progressDetail": ...}``)."""
        if not isinstance(event, dict):
            return
        if event.get("error") or event.get("errorDetail"):
            self.error = registry_error(event)
            return
        status, layer_id = str(event.get("status") or ""), event.get("id")
        # events without a layer ("Pulling from x", "Digest: ...", "Status: ...") and the tag's own line
        if not layer_id or status.startswith("Pulling from"):
            return
        layer = self.layers.setdefault(str(layer_id), _Layer())
        detail = event.get("progressDetail") or {}
        if status == "Downloading":
            total, current = detail.get("total"), detail.get("current")
            if isinstance(total, int) and total > 0:
                layer.total = total
            if isinstance(current, int) and current >= 0:
                layer.current = min(current, layer.total) if layer.total else current
        elif status in ("Download complete", "Verifying Checksum", "Extracting") and layer.total:
            layer.current = layer.total
        elif status in DONE_STATUSES:
            layer.done = True
            if layer.total:
                layer.current = layer.total

    @property
    def layers_total(self) -> int:
        return len(self.layers)

    @property
    def layers_done(self) -> int:
        return sum(1 for layer in self.layers.values() if layer.done)

    @property
    def bytes_total(self) -> int:
        """The sizes of the layers being downloaded, as far as the engine has told them."""
        return sum(layer.total or 0 for layer in self.layers.values())

    @property
    def bytes_done(self) -> int:
        return sum(layer.current for layer in self.layers.values())


def pull_phrase(image: str, progress: PullProgress) -> Phrase:
    """The spawn page's line for a pull under way: "Pulling image x — 3 of 7 layers, 412 MB of 1.9 GB"."""
    if not progress.layers_total:
        return Phrase("Pulling image {image}", image=image)
    if not progress.bytes_total:
        return Phrase(
            "Pulling image {image} — {done} of {total} layers",
            image=image,
            done=progress.layers_done,
            total=progress.layers_total,
        )
    return Phrase(
        "Pulling image {image} — {done} of {total} layers, {got} of {size}",
        image=image,
        done=progress.layers_done,
        total=progress.layers_total,
        got=format_bytes(progress.bytes_done),
        size=format_bytes(progress.bytes_total),
    )


def registry_error(error) -> str:
    """The registry's (or the engine's) own words for a failed pull: a stream's error event or docker-py's error."""
    if isinstance(error, dict):
        detail = error.get("errorDetail") or {}
        text = detail.get("message") if isinstance(detail, dict) else None
        return str(text or error.get("error") or error).strip()
    explanation = getattr(error, "explanation", None)
    if explanation:
        text = explanation.decode(errors="replace") if isinstance(explanation, bytes) else str(explanation)
        return text.strip()
    return str(error).strip() or type(error).__name__


class PullFailed(Exception):
    """A pull that did not bring its image: ``str(e)`` is the registry's error."""


class ImagePull:
    """One pull of one image by one Docker engine, under way or finished, with its progress for the waiters."""

    def __init__(self, image: str):
        self.image = image
        self.progress = PullProgress()
        self.started = time.monotonic()
        self.seconds: float | None = None  # how long it took, once finished
        self.error: str | None = None  # the registry's error, once failed
        self._changed: asyncio.Future | None = None
        self.finished: asyncio.Future = asyncio.get_running_loop().create_future()

    def _event(self, event: dict) -> None:
        self.progress.update(event)
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)

    def _finish(self, error: str | None) -> None:
        self.seconds = time.monotonic() - self.started
        self.error = error
        if not self.finished.done():
            self.finished.set_result(error)
        self._wake()

    async def changed(self, timeout: float) -> None:
        """Return at the pull's next event, at its end, or after ``timeout`` seconds, whichever comes first."""
        if self.finished.done():
            return
        if self._changed is None:
            self._changed = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._changed), timeout)
        except TimeoutError:
            pass


def _run_pull(client, image: str, on_event) -> str | None:
    """Pull ``image`` (blocking, in a pull thread), handing each event to ``on_event``; the error, or None."""
    repo, tag = split_image(image)
    error = None
    try:
        for event in client.pull(repo, tag=tag, stream=True, decode=True):
            on_event(event)
            if isinstance(event, dict) and (event.get("error") or event.get("errorDetail")):
                error = registry_error(event)
    except Exception as e:  # docker-py's APIError (the registry's answer), a lost connection to the engine
        error = registry_error(e)
    return error


#: The pulls under way in this hub process (and the last finished one of each image), by engine and image.
_PULLS: dict[tuple[str, str], ImagePull] = {}
_TASKS: set[asyncio.Task] = set()


def running_pull(client, image: str) -> ImagePull | None:
    """The pull of ``image`` under way on this engine, or None."""
    pull = _PULLS.get((str(getattr(client, "base_url", "")), image))
    return pull if pull is not None and not pull.finished.done() else None


def shared_pull(client, image: str, log) -> ImagePull:
    """The pull of ``image`` under way on this engine, or a new one started now (must run on the hub's loop)."""
    key = (str(getattr(client, "base_url", "")), image)
    pull = _PULLS.get(key)
    if pull is not None and not pull.finished.done():
        return pull
    pull = _PULLS[key] = ImagePull(image)
    loop = asyncio.get_running_loop()

    def on_event(event):  # in the pull's thread
        try:
            loop.call_soon_threadsafe(pull._event, event)
        except RuntimeError:  # the loop closed: the hub is stopping
            pass

    async def run():
        log.info("jupyterhub-gpu: pulling image %s", image)
        try:
            error = await in_thread(_run_pull, client, image, on_event)
        except BaseException as e:
            pull._finish(registry_error(e))
            raise
        pull._finish(error)
        if error:
            log.error("jupyterhub-gpu: image %s: pull failed after %.1f s: %s", image, pull.seconds, error)
        else:
            log.info("jupyterhub-gpu: image %s: pulled in %.1f s", image, pull.seconds)

    task = loop.create_task(run())
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)
    return pull


def prepull_order(profiles) -> list[str]:
    """The images to pre-pull, each once: the default profile's first (most spawns use it), then in order."""
    ordered = sorted(profiles, key=lambda p: not p.default)
    return list(dict.fromkeys(p.image for p in ordered if p.image))


async def prepull(client, images: list[str], log, is_missing, on_failed=None) -> dict[str, str]:
    """Check each image and pull those missing, all at once; each one's result, also in the hub's log.

    ``is_missing(image)`` is the blocking presence check (run in a pull thread);
    ``on_failed(image, error)`` is told of each failed pull. Results: "present",
    "pulled" or the registry's error.
    """

    async def one(image: str) -> str:
        try:
            missing = await in_thread(is_missing, image)
        except Exception as e:  # the engine unreachable: the start-up network check says so
            log.warning("jupyterhub-gpu: image %s: cannot check it: %s", image, e)
            return registry_error(e)
        if not missing:
            log.info("jupyterhub-gpu: image %s: present", image)
            return "present"
        log.info("jupyterhub-gpu: image %s: missing on this Docker host, pulling it in the background", image)
        pull = shared_pull(client, image, log)
        error = await asyncio.shield(pull.finished)
        if error and on_failed is not None:
            on_failed(image, error)
        return error or "pulled"

    results = await asyncio.gather(*(one(image) for image in images))
    return dict(zip(images, results, strict=True))


def start_prepull(client, images: list[str], log, is_missing, on_failed=None) -> asyncio.Task:
    """Run :func:`prepull` in the background of the hub's loop (the hub's start never waits for it)."""
    task = asyncio.get_running_loop().create_task(prepull(client, images, log, is_missing, on_failed))
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)
    return task
